-- release: hand runs that a stopping worker holds back to the delayed set, due now, same attempt.
-- KEYS[1] ready (stream)   KEYS[2] runs (hash: a run on the stream -> its entry id)
-- KEYS[3] entries (hash: run_id -> entry id of runs dispatched before zsched 0.3)
-- KEYS[4] delayed (B-tree root: the btree block)   KEYS[5] wake (pub/sub channel)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4..] pairs: entry_id, run_id (at most 1000)
-- Returns {code, ...} one per pair: 1 released (or a stale entry of a run that moved on to
--   another: acked and deleted, as ack.lua does); 0 refused, pending with another consumer
--   (fenced: reclaimed); 2 refused, gone: pending with no consumer (its outcome written
--   already), or pending with this one but its run no longer in `runs` (nothing to hand back).
--   An error reply (a malformed entry id, a bad argument) means nothing was written.
-- Invariant: a released run leaves the stream in the same call that puts it back in `delayed`;
--   its envelope (and so its attempt number) is unchanged.
-- Bound: 1000 pairs per call.
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
-- BEGIN streamid: entry ids checked before any write. Source: lua/lib/streamid.lua; `make lua`
--   copies it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- XPENDING and XRANGE refuse a malformed id with an error, which would stop a script after the
-- writes of the batch's earlier items: every ARGV[first], ARGV[first + step] ... up to
-- ARGV[upto] (default: the last) is checked first. Returns an error reply naming the bad id, or nil.
local function bad_entry_id(script, first, step, upto)
  for i = first, upto or #ARGV, step do
    local e = ARGV[i]
    local ms, seq = string.match(e, '^(%d+)%-(%d+)$')
    if not ((ms and #ms < 20 and #seq < 20) or (string.find(e, '^%d+$') and #e < 20)) then
      return redis.error_reply('ERR zsched ' .. script .. ': entry id ' .. string.sub(e, 1, 40) .. ' is not a stream id')
    end
  end
end
-- END streamid
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
-- Whether `entry` is the run's current entry: only it ends the run (a stale entry of a run that
-- moved on is acked and deleted, nothing more). Clears the legacy field when it is.
-- v: the run's value in `runs`, if the caller read it.
local function cur_is(runs, entries, legacy, run_id, entry, v)
  if run_id == '' then return false end
  v = v or redis.call('HGET', runs, run_id)
  if not v then return false end
  if v == entry then return true end
  if cur_entry(v) then return false end
  local e, key = cur_legacy(entries, legacy, run_id)
  if e == entry then
    redis.call('HDEL', key, run_id)
    return true
  end
  return false
end
-- Entry ids of ARGV[first], ARGV[first + step] ... up to ARGV[upto] (default: the last) as
-- Redis writes them ("<ms>-<seq>", no leading zeros): cur_is compares them as strings, while
-- XPENDING also takes "5" or "05-0" for the entry it names "5-0", so another spelling would
-- read as a stale entry (acked, its run left live). An error reply naming the first one
-- spelled otherwise, or nil; checked before any write (after bad_entry_id).
local function cur_spelling(script, first, step, upto)
  for i = first, upto or #ARGV, step do
    local e = ARGV[i]
    if not string.find(e, '^%d+%-%d+$') or string.find(e, '^0%d') or string.find(e, '%-0%d') then
      return redis.error_reply('ERR zsched ' .. script .. ': entry id ' .. string.sub(e, 1, 40) .. ' is not written as Redis writes it (<ms>-<seq>, no leading zeros)')
    end
  end
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
local ready, runs, entries, delayed, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local legacy = entries .. ':legacy' -- entries of runs dispatched by zsched 0.2 (current block)
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [legacy] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched release: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local err = bt_check(delayed, 'release', true)
if err then return err end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if (#ARGV - 3) % 2 ~= 0 or #ARGV - 3 > 2000 then
  return redis.error_reply('ERR zsched release: expected up to 1000 (entry_id, run_id) pairs')
end
local bad = bad_entry_id('release', 4, 2) or cur_spelling('release', 4, 2)
if bad then return bad end

local codes, moved, add_ids, add_dues = {}, 0, {}, {}
for i = 4, #ARGV, 2 do
  local entry, run_id = ARGV[i], ARGV[i + 1]
  -- Not filtered by consumer: the owner's name tells a fence (0) from an entry gone (2).
  local row = redis.call('XPENDING', ready, group, entry, entry, 1)[1]
  local v = row and row[2] == consumer and redis.call('HGET', runs, run_id)
  -- Only the run's current entry hands it back; its envelope is in the entry (a legacy run's,
  -- dispatched by zsched 0.2, after its value's tag). A stale entry (the run moved on: to
  -- another entry, or back into the tree) is only acked and deleted, as ack.lua does.
  local env, stale = nil, v and not cur_is(runs, entries, legacy, run_id, entry, v)
  if v and not stale then
    if v == entry then
      env = cur_envelope(ready, entry)
    else
      local _, rest = bt_untag(v)
      env = rest
    end
  end
  if stale then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    codes[#codes + 1] = 1
  elseif env then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    redis.call('HSET', runs, run_id, bt_tag(now_ms, env))
    moved = moved + 1
    add_ids[moved], add_dues[moved] = run_id, now_ms
    codes[#codes + 1] = 1
  elseif row and row[2] ~= consumer then
    codes[#codes + 1] = 0
  else
    codes[#codes + 1] = 2
  end
end
if moved > 0 then
  bt_add(delayed, add_ids, add_dues, false, nil, moved)
  redis.call('PUBLISH', wake, now_ms)
end
return codes
