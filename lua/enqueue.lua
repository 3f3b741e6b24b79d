-- enqueue: add runs to the delayed set, unless their run id is live or recently done.
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- KEYS[2] runs (hash: run_id -> due tag .. envelope)
-- KEYS[3] done (zset: run_id -> done_at_ms)     KEYS[4] stats (hash: counter -> n)
-- KEYS[5] wake (pub/sub channel, tagged like the keys)
-- ARGV[1] now_ms            "" = server TIME; tests pass a value
-- ARGV[2] dedupe_window_ms  a done run id stays a duplicate this long
-- ARGV[3] max_envelope_bytes
-- ARGV[4..] groups of 4: run_id, run_at_ms, task, envelope (one group per run; at most 1000);
--   run_at_ms may be "+N": N ms after now (server TIME), so relative delays ignore client skew
-- Returns {code, ...} one per run: 1 enqueued, 0 duplicate of a live run,
--   2 duplicate of a run done within the window. Bad input: error reply naming the run and
--   the field; nothing of the batch is written.
-- Publishes the earliest new run_at_ms on `wake` when that run becomes the head of `delayed`
--   (it sorts before every run already there: a run due with the head, after it, does not).
-- Invariant: a run id is live in `runs` at most once; a run enters `delayed` and `runs` together.
-- Bound: 1000 runs per call.
-- Counts in `stats`: enqueued, duplicate, duplicate:live, duplicate:done.
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
-- A run in a batch is {run_id, due_ms[, due_ms as decimal text]}. Numbers in a redis.call
-- are formatted by Redis with %.17g (~2.7 k instructions each): hot paths pass strings.
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
-- Add runs: list of {run_id, due_ms}, ids not in the tree. Sorted first (skipped when already
-- in order), so the runs bound for one leaf cost one lookup and one ZADD; the next leaf's
-- bound is read only when a second run may go to the same leaf (one run: 4 commands).
-- want_head: also return whether the earliest run now sorts before every run that was in the
-- tree (one more read, and only when it lands in the first leaf).
local function bt_add(d, items, want_head)
  local index, meta = d .. ':index', d
  local sorted, n_items = true, #items -- #t is a search: counted once
  local prev = items[1]
  for i = 2, n_items do
    -- (bt_before inlined: a Lua call per run costs as much as the comparison)
    local item = items[i]
    local due, prev_due = item[2], prev[2]
    if due < prev_due or (due == prev_due and bt_less(item[1], prev[1])) then
      sorted = false
      break
    end
    prev = item
  end
  if not sorted then
    table.sort(items, function(x, y) return bt_before(x[2], x[1], y[2], y[1]) end)
  end
  local head, counted = nil, nil -- head: known after the first pass
  local i = 1
  while i <= n_items do
    local k = bt_key(items[i][2], items[i][1])
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
        head = bt_before(items[1][2], items[1][1], tonumber(low[2]), low[1])
      end
    end
    local first, upto, upto_due, looked = i, nil, nil, false
    -- Whether items[j] belongs to this leaf: the first run of the pass does (m is its floor).
    local function belongs(j)
      if j == first then return true end
      if not looked then
        local nxt = redis.call('ZRANGE', index, '(' .. m, '+', 'BYLEX', 'LIMIT', '0', '1')[1]
        upto, looked = nxt and bt_bound(nxt), true
        upto_due = upto and tonumber(string.sub(upto, 1, 15))
      end
      if not upto then return true end
      local due = items[j][2]
      if due ~= upto_due then return due < upto_due end
      return bt_less(bt_key(due, items[j][1]), upto)
    end
    local card = redis.call('ZCARD', leaf)
    if card < BT_MAX then
      i = i + 1
      card = card + 1
      if i <= n_items and card < BT_MAX and belongs(i) then
        -- The leaf's later runs, belongs() inlined: once the next bound is read, the runs
        -- below it (all, in the last leaf) are compared by due, their keys only on a tie.
        i, card = i + 1, card + 1
        while i <= n_items and card < BT_MAX do
          if upto then
            local item = items[i]
            local due = item[2]
            if due > upto_due or (due == upto_due and not bt_less(bt_key(due, item[1]), upto)) then break end
          end
          i, card = i + 1, card + 1
        end
      end
      -- Members last first: a listpack leaf places each new member by walking from its head,
      -- so runs added in descending order land where the walk starts (the walk of a fresh
      -- leaf filled in ascending order was ~half of the ZADD's instructions).
      local args, a = {}, 0
      for j = i - 1, first, -1 do
        local item = items[j]
        -- The caller's text when it has it; a number goes to Redis as %.17g, exact below 10^17.
        args[a + 1], args[a + 2] = item[3] or item[2], item[1]
        a = a + 2
      end
      redis.call('ZADD', leaf, unpack(args))
    end
    if card >= BT_MAX and i <= n_items and belongs(i) then
      -- The next run belongs to this full leaf: split it; the next pass looks the run up again.
      local n = redis.call('HINCRBY', meta, 'seq', 1)
      local last = redis.call('ZRANGE', leaf, -1, -1, 'WITHSCORES')
      if bt_before(tonumber(last[2]), last[1], items[i][2], items[i][1]) then
        -- After all its runs: a new leaf starts here.
        redis.call('ZADD', index, 0, bt_key(items[i][2], items[i][1]) .. n)
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
local delayed, runs, done, stats, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional. `done`, `runs` and
-- the index are checked by their first reads (pcall; one run's HSETNX reads and writes), `stats`
-- by its first write (pcall), and `delayed` by bt_add's first write; what was written before a
-- refusal is taken back. (Each redis.call is a fixed cost of thousands of instructions: one
-- enqueue() into a leaf that is not the first runs 8 commands, the EVALSHA included.)
local function wrong_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched enqueue: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local function read(want, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then
    return nil, wrong_type(select(2, ...), want) or redis.error_reply(reply['err'])
  end
  return reply
end
local err
local now_ms = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local nargs = #ARGV - 3
-- Server time is read only when needed (a relative run_at, a recently done run id).
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
if not window_ms or not max_bytes then
  return redis.error_reply('ERR zsched enqueue: dedupe_window_ms and max_envelope_bytes must be numbers')
end
if nargs % 4 ~= 0 or nargs == 0 then
  return redis.error_reply('ERR zsched enqueue: expected groups of 4 arguments (run_id, run_at_ms, task, envelope)')
end
if nargs > 4000 then
  return redis.error_reply('ERR zsched enqueue: at most 1000 runs per call')
end

-- Run ids are text to workers and clients in every language: bytes that are not UTF-8 would
-- come back altered and strand the run. ASCII (the usual case) costs one find.
-- (The caller checks the largest byte first, by two C calls: a pattern find costs ~200
-- instructions per byte.)
local function is_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c, len, lo, hi = string.byte(s, i), 0, 0x80, 0xBF
    if c < 0x80 then len = 0
    elseif c >= 0xC2 and c <= 0xDF then len = 1
    elseif c >= 0xE0 and c <= 0xEF then
      len = 2
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 3
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else return false end
    for j = 1, len do
      local b = string.byte(s, i + j)
      if not b or b < lo or b > hi then return false end
      lo, hi = 0x80, 0xBF
    end
    i = i + len + 1
  end
  return true
end

-- Validate the whole batch before writing anything: scripts are not transactional.
local dues, texts = {}, {}
for i = 4, #ARGV, 4 do
  local run_id, run_at, task, env = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = (i - 4) / 4
  if run_id == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is empty')
  end
  if #run_id > 512 then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is longer than 512 bytes')
  end
  -- (Each C call costs ~1 k instructions: ASCII, the usual case, takes two.)
  if math.max(string.byte(run_id, 1, -1)) >= 128 and not is_utf8(run_id) then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is not valid UTF-8')
  end
  -- Decimal digits only (tonumber would take '1e3', '0x10', ' 5', '-0' too), converted by the
  -- VM's arithmetic (tonumber is a C call that parses the digits twice).
  local digits = string.match(run_at, '^%+?(%d+)$')
  local at = digits and digits + 0
  -- A relative due (+N) is checked as now + N.
  local relative = digits and #digits < #run_at
  if relative then at = at + now() end
  if not at or at > 253402300799999 then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': run_at_ms must be a whole number of epoch milliseconds >= 0, got ' .. string.sub(run_at, 1, 40))
  end
  dues[n + 1] = at
  -- The caller's digits go to the delayed set as they came (no number formatting).
  texts[n + 1] = not relative and run_at
  if task == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task is empty')
  end
  if #task > 256 then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task name is longer than 256 bytes')
  end
  if env == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is empty')
  end
  if #env > max_bytes then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is ' .. #env .. ' bytes, over the limit of ' .. max_bytes)
  end
end

-- Dedupe for the whole batch with one read of each container, then write the new runs with
-- one HSET and one ZADD: per run, Redis does no command of its own beyond those (one run:
-- HSETNX is the read of `runs` and its write).
local n = nargs / 4
local ids = {}
for i = 1, n do ids[i] = ARGV[4 * i] end
local live, done_at
done_at, err = read('zset', 'ZMSCORE', done, unpack(ids))
if err then return err end
-- One run not done within the window (the one-call enqueue): HSETNX reads and writes `runs` in
-- one command (taken back below when `stats` or the delayed set refuses the run).
local single = n == 1 and not (done_at[1] and tonumber(done_at[1]) > now() - window_ms)
if single then
  local wrote
  wrote, err = read('hash', 'HSETNX', runs, ids[1], bt_tag(dues[1], ARGV[7]))
  if err then return err end
  live = {wrote == 0}
else
  live, err = read('hash', 'HMGET', runs, unpack(ids))
  if err then return err end
end
local codes, seen, envs, items = {}, {}, {}, {}
local added, dups, dups_done = 0, 0, 0 -- added: also the length of items (#t is a search)
local earliest = nil
for i = 1, n do
  local run_id = ids[i]
  local code
  if live[i] or seen[run_id] then
    code = 0
  elseif done_at[i] and tonumber(done_at[i]) > now() - window_ms then
    code = 2
  else
    local at = dues[i]
    seen[run_id] = true
    if not single then
      envs[2 * added + 1], envs[2 * added + 2] = run_id, bt_tag(at, ARGV[4 * i + 3])
    end
    items[added + 1] = {run_id, at, texts[i] or nil}
    if not earliest or at < earliest then earliest = at end
    code = 1
  end
  if code == 1 then added = added + 1 else dups = dups + 1 end
  if code == 2 then dups_done = dups_done + 1 end
  codes[i] = code
end
-- The tree first: its first command reads the index, so a wrong type there is refused before
-- any write. bt_add tells whether the earliest new run is the new head (wake dispatchers).
-- The first write is a count in `stats` (a wrong type refused there, before anything else).
local function count(field, by)
  local got = redis.pcall('HINCRBY', stats, field, by)
  if type(got) == 'table' and got['err'] then return nil, wrong_type(stats, 'hash') or redis.error_reply(got['err']) end
  return got
end
local new_head = false
if added > 0 then
  local counted
  counted, err = count('enqueued', added == 1 and '1' or added)
  if err then
    if single then redis.call('HDEL', runs, ids[1]) end
    return err
  end
  local ok, res = pcall(bt_add, delayed, items, true)
  if not ok then
    if single then redis.call('HDEL', runs, ids[1]) end
    -- Taken back: the counters only grow, so a field that now holds `added` was not there.
    if counted == added then redis.call('HDEL', stats, 'enqueued') else redis.call('HINCRBY', stats, 'enqueued', -added) end
    return bt_check(delayed, 'enqueue', true) or redis.error_reply(type(res) == 'table' and res['err'] or tostring(res))
  end
  new_head = res
  if not single then redis.call('HSET', runs, unpack(envs)) end
end
if dups > 0 then
  local _, refused = count('duplicate', dups)
  if refused then return refused end
end
-- By kind, for the collector (docs/operations.md): of a live run, of one done in the window.
if dups > dups_done then redis.call('HINCRBY', stats, 'duplicate:live', dups - dups_done) end
if dups_done > 0 then redis.call('HINCRBY', stats, 'duplicate:done', dups_done) end
if new_head then redis.call('PUBLISH', wake, earliest) end
return codes
