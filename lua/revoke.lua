-- revoke: cancel a run wherever it is: a delayed or ready run is removed at once; for a running
--   run a cancel request is written, which the worker holding it acts on (discard.lua).
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- KEYS[2] runs (hash: run_id -> due tag .. envelope, or its entry id)   KEYS[3] entries (legacy: current block)
-- KEYS[4] ready (stream, read by group ARGV[3])        KEYS[5] done (zset: run_id -> done_at_ms)
-- KEYS[6] cancelled (zset: run_id -> cancelled_at_ms)  KEYS[7] stats (hash)
-- KEYS[8] cancel_request (string, this run's: the entry id of the running run; with a TTL)
-- KEYS[9] lease (string: the overlap lease of the run's rule)   KEYS[10] rule_waiting (hash)
-- KEYS[11] wake (channel)   (9-11 optional, with ARGV[5]: 8 keys is the older form, which
--   ends no lease: its caller calls unlease.lua after codes 1 and 2)
-- ARGV[1] now_ms   "" = server TIME
-- ARGV[2] run_id
-- ARGV[3] group    the consumer group of the ready stream
-- ARGV[4] dedupe_window_ms   how long records in `cancelled` (and a cancel request) are kept
-- ARGV[5] schedule_id   the rule of the lease key (the run id's part before its last @)
-- Returns {code, envelope}: 1 cancelled while delayed; 2 cancelled while ready (its stream
--   entry deleted before any worker read it); 3 requested (running: the worker holding it is
--   asked to stop; it ends `cancelled`); 0 no such run; 4 done already; 5 cancelled already.
--   envelope: the removed run's envelope for codes 1 and 2, else "". Bad input or a key of the
--   wrong type: error reply, nothing written.
-- Invariant: a run leaves `runs` (and its place in `delayed` or `ready`) in the call that
--   records it in `cancelled`, and (11 keys) frees its rule's lease in that call too
--   (lua/lib/lease.lua, as ack.lua: a waiting fire starts then), so no crash between two
--   calls leaves a lease held by a cancelled run; a running run is only asked, never taken
--   from its worker (discard.lua ends it and its lease).
-- Publishes on `wake` when it frees a lease or starts a waiting fire.
-- Bound: one run per call; trims `cancelled` records older than the window, O(log n + removed).
-- BEGIN btree: the delayed set, key layout 3. Source: lua/lib/btree.lua; `make lua` copies the
--   functions a script calls into it, and a test keeps the copies equal. Edit it there.
-- A B-tree of small ZSETs, so a waiting run costs ~40 bytes of index instead of the ~130 of
-- one skiplist ZSET (docs/architecture.md, "The delayed set"). `d` is the delayed key name:
--   d:index     ZSET, every score 0: a member per leaf, its bound then its number, so lex
--               order is (due, run id) order
--   d:leaf:<n>  ZSET run_id -> due_ms, at most BT_MAX runs (a listpack at default settings)
--   d           HASH seq (last leaf number), n (runs in the tree); a ZSET here is the
--               delayed set of key layout 2, which `zsched migrate` moves into the tree
-- A run's key: its due in 15 digits, its id with \0 escaped as \0\1, then \0\0: byte order of
-- keys is (due, id) order and no key is a prefix of another. The value of a delayed run in
-- `runs` starts with its due (bt_tag), so cancel finds its leaf from the run id alone.
-- Invariant: a leaf holds only runs with keys >= its bound and < the next leaf's bound; no
--   leaf is empty; d's n counts the runs in the leaves.
-- Strings are never compared with Lua's `<`: it follows the server's locale (strcoll).
-- Numbers in a redis.call are formatted by Redis with %.17g (~2.7 k instructions each): hot
-- paths pass strings.
local BT_MAX = 64
local function bt_key(due, id)
  -- A plain find first: gsub's pattern matcher costs ~200 instructions per byte of the id.
  if string.find(id, '\0', 1, true) then id = (string.gsub(id, '%z', '\0\1')) end
  return string.format('%015d', due) .. id .. '\0\0'
end
local function bt_num(m) return string.sub(m, (string.find(m, '\0\0', 16, true)) + 2) end
local function bt_bound(m) return string.sub(m, 1, (string.find(m, '\0\0', 16, true)) + 1) end
-- Lua's `<` on strings is strcoll: byte order in the C locales only (C, POSIX, C.UTF-8, whose
-- order is code point order), while Redis takes LC_COLLATE from its environment. Probed once
-- per call (ISO 14651 locales such as en_US fold case, skip punctuation, sort e-acute before
-- f); where it is not byte order, bt_less compares byte by byte. Probed on first use: most
-- calls compare no strings.
local BT_NATIVE
-- Byte order, as Redis orders ZSET members.
local function bt_less(x, y)
  if BT_NATIVE == nil then
    BT_NATIVE = ('B' < 'a') and ('Z' < '_') and ('_' < 'a') and ('-' < '0') and ('9' < 'A')
      and ('a-c' < 'ab') and ('a_c' < 'ab') and ('aB' < 'ab') and not ('ab' < 'aB')
      and ('f' < '\195\169') and ('a\0b' < 'a\0c') and ('a' < 'a\0')
  end
  if BT_NATIVE then return x < y end
  if x == y then return false end
  local n = math.min(#x, #y)
  local i = 1
  while i + 7 <= n do
    local a1, a2, a3, a4, a5, a6, a7, a8 = string.byte(x, i, i + 7)
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(y, i, i + 7)
    if a1 ~= b1 then return a1 < b1 end
    if a2 ~= b2 then return a2 < b2 end
    if a3 ~= b3 then return a3 < b3 end
    if a4 ~= b4 then return a4 < b4 end
    if a5 ~= b5 then return a5 < b5 end
    if a6 ~= b6 then return a6 < b6 end
    if a7 ~= b7 then return a7 < b7 end
    if a8 ~= b8 then return a8 < b8 end
    i = i + 8
  end
  while i <= n do
    local a, b = string.byte(x, i), string.byte(y, i)
    if a ~= b then return a < b end
    i = i + 1
  end
  return #x < #y
end
-- The value kept in `runs` for a run due at `due`: \0, 6 bytes of due ms (big-endian), envelope.
-- (enqueue.lua inlines it in its batch loop: a change here goes there too.)
-- (Arithmetic of the VM, not math.floor: each C function call costs about as much as the rest.)
local function bt_tag(due, env)
  local b6 = due % 256
  local r = (due - b6) / 256
  local b5 = r % 256
  r = (r - b5) / 256
  local b4 = r % 256
  r = (r - b4) / 256
  local b3 = r % 256
  r = (r - b3) / 256
  local b2 = r % 256
  return string.char(0, (r - b2) / 256, b2, b3, b4, b5, b6) .. env
end
-- The due of a tagged value (nil if untagged) and the envelope without the tag.
local function bt_untag(v)
  if string.byte(v, 1) ~= 0 then return nil, v end
  local due = 0
  for i = 2, 7 do due = due * 256 + string.byte(v, i) end
  return due, string.sub(v, 8)
end
-- The leaf member whose range holds key k, or nil when k sorts before every bound.
local function bt_floor(d, k)
  return redis.call('ZRANGE', d .. ':index', '[' .. k .. '\255', '-', 'BYLEX', 'REV', 'LIMIT', '0', '1')[1]
end
-- (due, id) order of two runs without building their keys: ids in byte order on a tie.
local function bt_before(due1, id1, due2, id2)
  if due1 ~= due2 then return due1 < due2 end
  return bt_less(id1, id2)
end
-- Add runs: ids[j] due at dues[j] (j = 1..n; n defaults to #ids), ids not in the tree;
-- texts[j], when given and not false, is dues[j] as decimal text, sent to ZADD as it is.
-- Parallel arrays, not a table per run: a small table costs ~1 k instructions to make and
-- collect. Sorted first (skipped when already in order; else sorted copies of the arrays), so
-- the runs bound for one leaf cost one lookup and one ZADD; the next leaf's bound is read only
-- when a second run may go to the same leaf (one run: 4 commands).
-- want_head: also return whether the earliest run now sorts before every run that was in the
-- tree (one more read, and only when it lands in the first leaf).
local function bt_add(d, ids, dues, want_head, texts, n_items)
  local index, meta = d .. ':index', d
  n_items = n_items or #ids -- #t is a search: counted once
  texts = texts or dues
  local sorted, prev_due = true, dues[1]
  for i = 2, n_items do
    -- (bt_before inlined: a Lua call per run costs as much as the comparison)
    local due = dues[i]
    if due <= prev_due and (due < prev_due or bt_less(ids[i], ids[i - 1])) then
      sorted = false
      break
    end
    prev_due = due
  end
  if not sorted then
    local order = {}
    for i = 1, n_items do order[i] = i end
    table.sort(order, function(x, y) return bt_before(dues[x], ids[x], dues[y], ids[y]) end)
    local s_ids, s_dues, s_texts = {}, {}, {}
    for i = 1, n_items do
      local j = order[i]
      s_ids[i], s_dues[i], s_texts[i] = ids[j], dues[j], texts[j]
    end
    ids, dues, texts = s_ids, s_dues, s_texts
  end
  local head, counted = nil, nil -- head: known after the first pass
  local args = {} -- a leaf's ZADD arguments, reused by every pass
  local i = 1
  while i <= n_items do
    local k = bt_key(dues[i], ids[i])
    -- The leaf whose range holds k, and the one before it (none: it is the first leaf).
    local found = redis.call('ZRANGE', index, '[' .. k .. '\255', '-', 'BYLEX', 'REV', 'LIMIT', '0', '2')
    local m = found[1]
    -- The first write on d comes after the first read of the index, before any other write: a
    -- caller may run bt_add under pcall to learn a wrong type of either before anything changed.
    if not counted then counted = redis.call('HINCRBY', meta, 'n', n_items == 1 and '1' or n_items) end
    if not m then
      -- Before every bound: the first leaf takes it and its bound moves down to it.
      if head == nil then head = true end
      m = redis.call('ZRANGE', index, '0', '0')[1]
      if m then
        redis.call('ZREM', index, m)
        m = k .. bt_num(m)
      else
        m = k .. redis.call('HINCRBY', meta, 'seq', '1')
      end
      redis.call('ZADD', index, '0', m)
    end
    local leaf = d .. ':leaf:' .. bt_num(m)
    if head == nil then
      head = false
      if want_head and not found[2] then
        local low = redis.call('ZRANGE', leaf, '0', '0', 'WITHSCORES')
        head = bt_before(dues[1], ids[1], tonumber(low[2]), low[1])
      end
    end
    local first, upto, upto_due, looked = i, nil, nil, false
    -- Whether run j belongs to this leaf: the first run of the pass does (m is its floor).
    local function belongs(j)
      if j == first then return true end
      if not looked then
        local nxt = redis.call('ZRANGE', index, '(' .. m, '+', 'BYLEX', 'LIMIT', '0', '1')[1]
        upto, looked = nxt and bt_bound(nxt), true
        upto_due = upto and tonumber(string.sub(upto, 1, 15))
      end
      if not upto then return true end
      local due = dues[j]
      if due ~= upto_due then return due < upto_due end
      return bt_less(bt_key(due, ids[j]), upto)
    end
    local card = redis.call('ZCARD', leaf)
    if card < BT_MAX then
      i = i + 1
      card = card + 1
      if i <= n_items and card < BT_MAX and belongs(i) then
        -- The leaf's later runs, belongs() inlined: once the next bound is read, the runs
        -- below it are compared by due, their keys only on a tie.
        i, card = i + 1, card + 1
        if upto then
          while i <= n_items and card < BT_MAX do
            local due = dues[i]
            if due > upto_due or (due == upto_due and not bt_less(bt_key(due, ids[i]), upto)) then break end
            i, card = i + 1, card + 1
          end
        else
          -- The last leaf takes the runs up to its room, compared with nothing.
          local take = n_items - i + 1
          if take > BT_MAX - card then take = BT_MAX - card end
          i, card = i + take, card + take
        end
      end
      -- Members last first: a listpack leaf places each new member by walking from its head,
      -- so runs added in descending order land where the walk starts (the walk of a fresh
      -- leaf filled in ascending order was ~half of the ZADD's instructions).
      local a = 0
      for j = i - 1, first, -1 do
        -- The caller's text when it has it; a number goes to Redis as %.17g, exact below 10^17.
        args[a + 1], args[a + 2] = texts[j] or dues[j], ids[j]
        a = a + 2
      end
      redis.call('ZADD', leaf, unpack(args, 1, a))
    end
    if card >= BT_MAX and i <= n_items and belongs(i) then
      -- The next run belongs to this full leaf: split it; the next pass looks the run up again.
      local n = redis.call('HINCRBY', meta, 'seq', 1)
      local last = redis.call('ZRANGE', leaf, -1, -1, 'WITHSCORES')
      if bt_before(tonumber(last[2]), last[1], dues[i], ids[i]) then
        -- After all its runs: a new leaf starts here.
        redis.call('ZADD', index, 0, bt_key(dues[i], ids[i]) .. n)
      else
        local upper = redis.call('ZRANGE', leaf, BT_MAX / 2, -1, 'WITHSCORES')
        local moved, a = {}, 0
        for j = #upper - 1, 1, -2 do -- last first, as above
          moved[a + 1], moved[a + 2] = upper[j + 1], upper[j]
          a = a + 2
        end
        redis.call('ZADD', d .. ':leaf:' .. n, unpack(moved))
        redis.call('ZREMRANGEBYRANK', leaf, BT_MAX / 2, -1)
        redis.call('ZADD', index, 0, bt_key(tonumber(upper[2]), upper[1]) .. n)
      end
    end
  end
  return head == true
end
-- Remove one run; 1 if it was in the tree at that due, else 0.
local function bt_remove(d, id, due)
  local m = bt_floor(d, bt_key(due, id))
  if not m then return 0 end
  local leaf = d .. ':leaf:' .. bt_num(m)
  local score = redis.call('ZSCORE', leaf, id)
  if not score or tonumber(score) ~= due then return 0 end
  redis.call('ZREM', leaf, id)
  if redis.call('EXISTS', leaf) == 0 then redis.call('ZREM', d .. ':index', m) end
  redis.call('HINCRBY', d, 'n', -1)
  return 1
end
-- Refuse a delayed set of key layout 2 or keys of the wrong type (d, and the index unless a
-- caller reads it with pcall first); nil when all is well.
local function bt_check(d, script, index_too)
  local want_of = {[d] = 'hash'}
  if index_too then want_of[d .. ':index'] = 'zset' end
  for key, want in pairs(want_of) do
    local got = redis.call('TYPE', key)['ok']
    if got ~= 'none' and got ~= want then
      if key == d and got == 'zset' then
        return redis.error_reply('WRONGTYPE zsched ' .. script .. ': key ' .. d .. ' holds a delayed set of key layout 2; run `zsched migrate` (docs/operations.md)')
      end
      return redis.error_reply('WRONGTYPE zsched ' .. script .. ': key ' .. key .. ' is a ' .. got .. ', expected a ' .. want)
    end
  end
end
-- END btree
-- BEGIN lease: the end of a rule's overlap lease. Source: lua/lib/lease.lua; `make lua` copies
--   it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- Uses the btree block (bt_tag, bt_add): a script that calls it has both blocks, btree first.
-- A rule's run ended (done, dead or cancelled): free the rule's lease if the run holds it, and
-- when the lease is free start the fire that waited for it (overlap = queue), due now, with
-- the lease. A waiting fire whose run id is live, or done within window_ms (enqueued by hand,
-- or a forced manual fire of its instant), is dropped: that run is the slot's. The caller
-- checked the types of lease (string), waiting (hash), runs (hash), delayed and done (zset;
-- done may be nil: the live check only). Publishes on `wake` when it frees the lease (a
-- catch-up replay may wait for it) or starts a waiting fire.
-- Returns released (1 if this run held the lease), started (the run id started, or '').
local function lease_end(lease, waiting, runs, delayed, wake, done, window_ms, now_ms, sid, run_id)
  local released = 0
  if redis.call('GET', lease) == run_id then
    redis.call('DEL', lease)
    released = 1
    redis.call('PUBLISH', wake, now_ms)
  end
  local started = ''
  if redis.call('EXISTS', lease) == 0 then
    local w = redis.call('HGET', waiting, sid)
    if w then
      local n = tonumber(string.match(w, '^(%d+):'))
      local head = #tostring(n) + 1
      started = string.sub(w, head + 1, head + n)
      redis.call('HDEL', waiting, sid)
      local finished = done and redis.call('ZSCORE', done, started)
      if redis.call('HEXISTS', runs, started) == 1
          or (finished and tonumber(finished) > now_ms - window_ms) then
        started = ''
      else
        redis.call('HSET', runs, started, bt_tag(now_ms, string.sub(w, head + n + 1)))
        bt_add(delayed, {started}, {now_ms})
        redis.call('SET', lease, started) -- no TTL, as fire.lua's
        redis.call('PUBLISH', wake, now_ms)
      end
    end
  end
  return released, started
end
-- END lease
-- BEGIN current: a run's entry on the ready stream. Source: lua/lib/current.lua; `make lua`
--   copies it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- While a run is on the stream (ready or running), its value in `runs` is its entry id
-- ("<ms>-<seq>"): dispatch.lua writes it over the due tag and envelope, whose envelope is then
-- in the entry. Runs dispatched by zsched 0.2 kept their tagged value and had the entry id in
-- the `entries` hash instead; dispatch.lua renames that hash to `<entries>:legacy` (`legacy`
-- below) and those runs are read from there (cur_legacy) until they finish.
-- The entry id a value of `runs` names, or nil: a delayed run's tagged value, an envelope of
-- key layout 2, a legacy run (its entry is in `legacy`).
local function cur_entry(v)
  if v and string.find(v, '^%d+%-%d+$') then return v end
end
-- The entry id zsched 0.2 recorded for run_id and the hash it is in: `legacy` (0.2's
-- `entries`, renamed by the first 0.3 dispatch that moves runs), or `entries` itself while it
-- is still 0.2's hash (no 0.3 dispatcher has moved runs yet: the workers were upgraded
-- first). nil when neither has it.
local function cur_legacy(entries, legacy, run_id)
  if redis.call('TYPE', entries)['ok'] == 'hash' then
    -- Newer than `legacy` if both exist (0.2 wrote again after the string was deleted by hand).
    local e = redis.call('HGET', entries, run_id)
    if e then return e, entries end
  end
  local e = redis.call('HGET', legacy, run_id)
  if e then return e, legacy end
end
-- The run's current entry id (from `runs`, else cur_legacy), or nil when it is not on the
-- stream. v: its value in `runs` (false/nil: none).
local function cur_of(entries, legacy, run_id, v)
  if not v then return nil end
  return cur_entry(v) or (cur_legacy(entries, legacy, run_id))
end
-- The envelope in an entry's `envelope` field, in either shape dispatch.lua writes: plain (the
-- envelope; a `due_ms` field beside it) or tagged (the run's value of `runs` as it was: due
-- tag, then envelope; its first byte 0, which no envelope starts with; docs/protocol.md, "Keys").
local function cur_untag(v)
  if string.byte(v) == 0 and #v >= 7 then return string.sub(v, 8) end
  return v
end
-- The envelope of stream entry `entry` (nil when it is gone), in either shape (cur_untag).
local function cur_envelope(ready, entry)
  local row = redis.call('XRANGE', ready, entry, entry)[1]
  if not row then return nil end
  local f = row[2]
  for j = 1, #f, 2 do
    if f[j] == 'envelope' then return cur_untag(f[j + 1]) end
  end
end
-- END current
local delayed, runs, entries, ready, done, cancelled, stats, request = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local legacy = entries .. ':legacy' -- entries of runs dispatched by zsched 0.2 (current block)
local lease, waiting, wake = KEYS[9], KEYS[10], KEYS[11]
local now_ms, run_id, group, window_ms, sid = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if run_id == '' then return redis.error_reply('ERR zsched revoke: run_id is empty') end
if not window_ms or window_ms < 0 then return redis.error_reply('ERR zsched revoke: dedupe_window_ms must be a number >= 0') end
if not (#KEYS == 8 or (#KEYS == 11 and sid and sid ~= '')) then
  return redis.error_reply('ERR zsched revoke: expected 8 keys, or 11 (lease, rule_waiting, wake) with a schedule_id')
end
local err = bt_check(delayed, 'revoke', true)
if err then return err end
local types = {[runs] = 'hash', [legacy] = 'hash', [ready] = 'stream', [done] = 'zset', [cancelled] = 'zset', [stats] = 'hash', [request] = 'string'}
if lease then types[lease], types[waiting] = 'string', 'hash' end
for key, want in pairs(types) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched revoke: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function record(env, code)
  redis.call('HDEL', runs, run_id)
  redis.call('ZADD', cancelled, now_ms, run_id)
  redis.call('ZREMRANGEBYSCORE', cancelled, '-inf', '(' .. (now_ms - window_ms))
  if window_ms > 0 then redis.call('PEXPIRE', cancelled, window_ms) end
  redis.call('HINCRBY', stats, 'cancelled', 1)
  if lease then lease_end(lease, waiting, runs, delayed, wake, done, window_ms, now_ms, sid, run_id) end
  return {code, env}
end

local v = redis.call('HGET', runs, run_id)
if v then
  local due, env = bt_untag(v)
  if due and bt_remove(delayed, run_id, due) == 1 then return record(env, 1) end
  if not due and not cur_entry(v) and redis.call('ZREM', delayed .. ':layout2', run_id) == 1 then return record(env, 1) end
  local entry = cur_of(entries, legacy, run_id, v)
  if entry then
    local row = redis.pcall('XPENDING', ready, group, entry, entry, 1)
    if type(row) == 'table' and not row['err'] and row[1] then
      -- Read by a worker: ask it. The value names the entry, so a later run with the same id
      -- is not cancelled by a request left from this one.
      redis.call('SET', request, entry, 'PX', math.max(window_ms, 1))
      return {3, ''}
    end
    -- Not read by any worker yet: nobody holds it, so it can go now. Its envelope is in the
    -- entry (a legacy run's, dispatched before zsched 0.3, after its value's tag).
    if cur_entry(v) then env = cur_envelope(ready, entry) or '' end
    redis.call('XDEL', ready, entry)
    if not cur_entry(v) then
      local _, key = cur_legacy(entries, legacy, run_id)
      if key then redis.call('HDEL', key, run_id) end
    end
    return record(env, 2)
  end
  -- Live but neither in the tree nor on the stream: cannot happen through the scripts.
  return {0, ''}
end
if redis.call('ZSCORE', done, run_id) then return {4, ''} end
if redis.call('ZSCORE', cancelled, run_id) then return {5, ''} end
return {0, ''}
