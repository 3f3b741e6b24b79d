-- ack: finish runs: acknowledge and delete their stream entries, record their completion, and
--   end the overlap leases of the rule runs among them (starting the fires that waited).
-- KEYS[1] ready (stream)    KEYS[2] runs (hash: a run on the stream -> its entry id)
-- KEYS[3] entries (hash: run_id -> entry id of runs dispatched before zsched 0.3)
-- KEYS[4] done (zset: run_id -> done_at_ms)        KEYS[5] stats (hash)
-- KEYS[6] rule_waiting (hash)   KEYS[7] delayed (B-tree root)   KEYS[8] wake (channel)
--   (6-8 optional: a caller with no lease to end may pass 5 keys, the older form)
-- KEYS[9..] the lease (string) of each rule run of the batch that holds one, one per lease
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4] dedupe_window_ms   completion records older than this are trimmed
-- ARGV[5] trim_limit         at most this many old completion records removed per call
-- ARGV[6..] pairs: entry_id, run_id (at most 1000), best in stream order (ascending ids);
--   then, for each key of KEYS[9..] in order: schedule_id, run_id (a run among the pairs)
-- Returns {code, ...} one per pair: 1 acked; 0 refused, the entry is pending with another
--   consumer (fenced: reclaimed); 2 refused, the entry is pending with no consumer (acked
--   already: by whoever reclaimed it, or by this consumer's earlier call whose reply was lost).
-- Invariant: only the consumer that owns a pending entry can finish it; an entry leaves the
--   stream in the call that acknowledges it; a run leaves `runs` in the same call that
--   records it in `done`, and frees its rule's lease in that call too (lua/lib/lease.lua,
--   as unlease.lua: a waiting fire starts then), so no crash between them leaves a lease
--   held by a finished run; a fenced or stale entry's run keeps its lease. `done` expires
--   dedupe_window_ms after the last completion (every record in it is then older than the
--   window).
-- Publishes on `wake` when it frees a lease or starts a waiting fire.
-- Bound: 1000 pairs, as many leases, and trim_limit records per call; the ownership check reads at most
--   2 * pairs + 1000 pending entries between the first and the last pair's entry, then checks
--   the rest one by one (pairs in stream order are the fast case; a range holding exactly
--   the pairs, in their order, is settled by comparing ids one for one); the trim of the
--   acknowledged prefix (calls of 16 owned entries or more) reads XINFO GROUPS and one XPENDING
--   summary per group (at most 4 groups of 256 consumers, else no trim), then trims exactly
--   below the oldest entry a group still needs (XTRIM MINID): every entry there is already
--   deleted but this call's own (an entry leaves the stream when it is acknowledged), so it
--   frees the nodes of this call's entries and walks one node (100 entries) at most; XDEL
--   then takes the owned entries the trim left (found with at most log2(pairs) + 2 parsed ids).
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
-- END current
local ready, runs, entries, done, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local legacy = entries .. ':legacy' -- entries of runs dispatched by zsched 0.2 (current block)
local waiting, delayed, wake, lease_keys = KEYS[6], KEYS[7], KEYS[8], {unpack(KEYS, 9)}
-- Check types before any write: a script is atomic but not transactional. `ready` is checked
-- by its first read (pcall), `legacy` before its first read (only a 0.2 run's ack reads it;
-- `entries` is read only while TYPE says it is a hash), both before the first write.
local function wrong_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched ack: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local function read(key, want, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then return nil, wrong_type(key, want) or reply end
  return reply
end
for key, want in pairs({[runs] = 'hash', [done] = 'zset', [stats] = 'hash'}) do
  local err = wrong_type(key, want)
  if err then return err end
end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
local window_ms, trim_limit = tonumber(ARGV[4]), tonumber(ARGV[5])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local n_leases = #lease_keys
if (#ARGV - 5) % 2 ~= 0 or #ARGV - 5 - 2 * n_leases > 2000 or n_leases > 1000 or not window_ms
    or not trim_limit or #ARGV - 5 < 2 * n_leases or (#KEYS ~= 5 and #KEYS < 8) then
  return redis.error_reply('ERR zsched ack: expected window, trim limit, up to 1000 (entry_id, run_id) pairs and a (schedule_id, run_id) per lease key')
end

local n = (#ARGV - 5) / 2 - n_leases
-- The pairs are read where they are (pair i: ARGV[4 + 2i], ARGV[5 + 2i]): copying them into
-- two tables cost ~1.4 k instructions a pair (inserts and the tables' rehashes as they grow).
local pairs_argv = ARGV

-- The leases to end, checked before any write. The shared blocks are defined only for a call
-- that has leases: each `local function` costs a closure on every call that runs it.
local end_leases = nil
if n_leases > 0 then
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
  local bad = bt_check(delayed, 'ack', true) or wrong_type(waiting, 'hash')
  for j = 1, n_leases do bad = bad or wrong_type(lease_keys[j], 'string') end
  if bad then return bad end
  local first = 5 + 2 * n
  -- The leases of the runs `finished` (run_id -> true) holds: freed, waiting fires started.
  end_leases = function(finished)
    for j = 1, n_leases do
      local sid, run_id = ARGV[first + 2 * j - 1], ARGV[first + 2 * j]
      if finished[run_id] then
        lease_end(lease_keys[j], waiting, runs, delayed, wake, done, window_ms, now_ms, sid, run_id)
      end
    end
  end
end

-- Ownership, for the whole batch at once: page through this consumer's pending entries
-- between the batch's first and last id. Callers pass the pairs in stream order (the Python
-- wrapper sorts them), and a worker acks entries it read together, so the range holds little
-- else. An id not found there (out of order, past the budget, or not ours) is checked alone,
-- so the order only costs time. No id is parsed here: a pattern match costs ~9 k instructions
-- an id, as much as the XPENDING.
-- pending: id -> true while in the range and not taken by a pair of this call, false once
-- taken (a later pair with the same id is refused). pages keep the range in stream order.
-- exact: the usual call, settled without the table: the range's rows are the pairs, one for
-- one in the same order (so every pair is ours, and none is given twice). Ids compare as
-- interned strings, so checking costs a few instructions a pair (building `pending` ~1 k).
local pending, pages, exact = {}, {}, false
if n > 0 then
  local start, budget = pairs_argv[6], 2 * n + 1000
  while budget > 0 do
    local page, err = read(ready, 'stream', 'XPENDING', ready, group, start, pairs_argv[4 + 2 * n], 1000, consumer)
    if err then return err end
    local rows = #page
    if #pages == 0 and rows == n then
      exact = true
      for j = 1, n do
        if page[j][1] ~= pairs_argv[4 + 2 * j] then
          exact = false
          break
        end
      end
      if exact then
        pages[1] = page
        break
      end
    end
    for j = 1, rows do pending[page[j][1]] = true end
    pages[#pages + 1] = page -- in stream order: XPENDING lists ascending ids
    budget = budget - rows
    if rows < 1000 then break end
    start = '(' .. page[#page][1]
  end
end
-- 1 ours, 0 pending with another consumer, 2 pending with none (one XPENDING tells all three).
local function holder(id)
  local p = pending[id]
  if p then return 1 end
  if p == false then return 0 end -- taken by an earlier pair of this call
  local row = redis.call('XPENDING', ready, group, id, id, 1)[1]
  if not row then return 2 end
  return row[2] == consumer and 1 or 0
end

local codes, owned, owned_runs, alone, fenced, gone, o = {}, {}, {}, {}, 0, 0, 0
if exact then
  for i = 1, n do
    owned[i], owned_runs[i], codes[i] = pairs_argv[4 + 2 * i], pairs_argv[5 + 2 * i], 1
  end
  o = n
end
for i = 1, exact and 0 or n do
  local id = pairs_argv[4 + 2 * i]
  local code = holder(id)
  if code == 1 then
    if pending[id] == nil then alone[#alone + 1] = id end -- checked alone: order unknown
    pending[id] = false
    o = o + 1 -- a counter, not #t: the length operator is a search on every append
    owned[o], owned_runs[o] = id, pairs_argv[5 + 2 * i]
    codes[i] = 1
  elseif code == 0 then
    fenced = fenced + 1
    codes[i] = 0
  else
    gone = gone + 1 -- a resend after a lost reply lands here: the caller judges (protocol.md)
    codes[i] = 2
  end
end

-- The oldest entry some consumer group still needs: the lowest of each group's oldest pending
-- entry and the entry after its last delivered one. Every entry before it is acknowledged (or
-- deleted) by every group. nil (trim nothing) when unsure: an id it cannot read, more than
-- MAX_GROUPS groups or MAX_CONSUMERS consumers in one (XPENDING's summary lists them all).
local MAX_GROUPS, MAX_CONSUMERS, TRIM_FROM = 4, 256, 16
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if ms and #ms < 16 and #seq < 16 then return tonumber(ms), tonumber(seq) end
end
local function keep_from()
  local keep_ms, keep_seq
  local function lower(id, after)
    local ms, seq = id_parts(id)
    if not ms then return false end
    if after then seq = seq + 1 end
    if not keep_ms or ms < keep_ms or (ms == keep_ms and seq < keep_seq) then keep_ms, keep_seq = ms, seq end
    return true
  end
  local groups = redis.call('XINFO', 'GROUPS', ready)
  if #groups > MAX_GROUPS then return nil end
  for _, g in ipairs(groups) do
    local f = {}
    for j = 1, #g, 2 do f[g[j]] = g[j + 1] end
    local waiting, consumers = tonumber(f['pending']), tonumber(f['consumers'])
    if not (f['name'] and waiting and consumers and consumers <= MAX_CONSUMERS) then return nil end
    if not (f['last-delivered-id'] and lower(f['last-delivered-id'], true)) then return nil end
    if waiting > 0 and not lower(redis.call('XPENDING', ready, f['name'])[2] or '', false) then return nil end
  end
  if keep_ms then return string.format('%d-%d', keep_ms, keep_seq), keep_ms, keep_seq end
end
-- The owned entries an exact trim to `keep` leaves on the stream (ids at or after it), and
-- whether the trim has any of this call's entries to take: a range row before `keep` is no
-- longer pending, so it is one this call acknowledged. Entries checked alone (outside the
-- range: order unknown) are always left to XDEL. The range's rows are in stream order: a look
-- at both ends settles the usual cases (every row before `keep`, or none: a slow run pins it)
-- with one or two parsed ids, else a binary search finds the first row at or after it.
local function left_after(keep_ms, keep_seq)
  local function before(row)
    local ms, seq = id_parts(row[1])
    return ms and (ms < keep_ms or (ms == keep_ms and seq < keep_seq))
  end
  local left, l, trimmed = {}, #alone, false
  for i = 1, l do left[i] = alone[i] end
  for j = #pages, 1, -1 do
    local page = pages[j]
    local rows = #page
    local lo = 1 -- the first row at or after keep
    if rows == 0 then
      lo = 1
    elseif before(page[rows]) then
      lo = rows + 1
    elseif before(page[1]) then
      local a, b = 2, rows -- page[a - 1] is before keep, page[b] is not
      while a < b do
        local mid = (a + b - (a + b) % 2) / 2
        if before(page[mid]) then a = mid + 1 else b = mid end
      end
      lo = a
    end
    for r = lo, rows do
      local id = page[r][1]
      if exact or pending[id] == false then
        l = l + 1
        left[l] = id
      end
    end
    if lo > 1 then -- so is every row of the earlier pages
      trimmed = true
      break
    end
  end
  return left, l, trimmed
end

-- A run finishes only through its current entry (a stale entry of a run that moved on is
-- acked and deleted, nothing more): its value in `runs` is that entry's id (current block).
-- A legacy run (dispatched by zsched 0.2: tagged value, entry id in `entries`, or `legacy`
-- once a 0.3 dispatch renamed it) is read by cur_legacy; only then are they touched.
local current, err, legacy_ids = {}, nil, nil
if o > 0 then current, err = read(runs, 'hash', 'HMGET', runs, unpack(owned_runs)) end
if err then return err end
for i = 1, o do
  local v = current[i]
  if v and v ~= owned[i] and not cur_entry(v) then
    if not legacy_ids then
      -- Checked before the first write, as every key here (the legacy hash is read only now).
      err = wrong_type(legacy, 'hash')
      if err then return err end
      legacy_ids = {}
    end
    local e, key = cur_legacy(entries, legacy, owned_runs[i])
    if e == owned[i] then
      current[i] = e
      legacy_ids[key] = legacy_ids[key] or {}
      local ids = legacy_ids[key]
      ids[#ids + 1] = owned_runs[i]
    end
  end
end
if o > 0 then
  redis.call('XACK', ready, group, unpack(owned))
  -- Delete the acknowledged entries. First every entry no group needs any more (XTRIM MINID,
  -- exact: whole nodes freed, the entries of the first node left below `keep` marked deleted
  -- in one walk of that node), then XDEL only the owned entries at or after `keep`: XDEL walks
  -- an entry's node from its start for each id (up to stream-node-max-entries, 100), even for
  -- an id already gone. The stream keeps exactly the entries it kept before (no acknowledged
  -- entry stays, every entry below `keep` is acknowledged by every group), so XLEN and memory
  -- are as before. Worth its reads (XINFO GROUPS, the XPENDING summary) from TRIM_FROM owned
  -- entries on (callgrind, instructions a run: at 10 a call it saves 68 k -> 61 k when the
  -- call's entries are the oldest but costs 67 k -> 75 k when an older entry stays pending;
  -- at 20 a call 54 k -> 45 k and 61 k -> 60 k).
  local keep, keep_ms, keep_seq = nil, nil, nil
  if o >= TRIM_FROM then keep, keep_ms, keep_seq = keep_from() end
  if keep then
    local left, l, trimmed = left_after(keep_ms, keep_seq)
    if trimmed then redis.call('XTRIM', ready, 'MINID', keep) end
    if l > 0 then redis.call('XDEL', ready, unpack(left)) end
  else
    redis.call('XDEL', ready, unpack(owned))
  end
  -- The score as a string once: a number is formatted again for every argument it is in.
  local finished, records, f, at = {}, {}, 0, string.format('%d', now_ms)
  for i = 1, o do
    if current[i] == owned[i] then
      f = f + 1
      finished[f] = owned_runs[i]
      records[2 * f - 1], records[2 * f] = at, owned_runs[i]
    end
  end
  if #finished > 0 then
    redis.call('HDEL', runs, unpack(finished))
    for key, ids in pairs(legacy_ids or {}) do redis.call('HDEL', key, unpack(ids)) end
    redis.call('ZADD', done, unpack(records))
    -- Every record is younger than the newest one: when no run finishes for a whole window
    -- they have all expired, so the key may go (memory returns to its baseline after a drain).
    if window_ms > 0 then redis.call('PEXPIRE', done, window_ms) end
    if end_leases then
      local set = {}
      for i = 1, f do set[finished[i]] = true end
      end_leases(set)
    end
  end
  redis.call('HINCRBY', stats, 'acked', o)
end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if gone > 0 then redis.call('HINCRBY', stats, 'gone', gone) end
if trim_limit > 0 then
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now_ms - window_ms, 'LIMIT', 0, trim_limit)
  if #old > 0 then redis.call('ZREM', done, unpack(old)) end
end
return codes
