-- enqueue: add runs to the delayed set, unless their run id is live or recently done.
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- KEYS[2] runs (hash: run_id -> due tag .. envelope)
-- KEYS[3] done (zset: run_id -> done_at_ms)     KEYS[4] stats (hash: counter -> n)
-- KEYS[5] wake (pub/sub channel, tagged like the keys)
-- ARGV[1] now_ms            "" = server TIME; tests pass a value
-- ARGV[2] dedupe_window_ms  a done run id stays a duplicate this long
-- ARGV[3] max_envelope_bytes
-- ARGV[4..] groups of 4: run_id, run_at_ms, task, envelope (one group per run; at most 1000);
--   run_at_ms may be "+N": N ms after now (server TIME), so relative delays ignore client skew;
--   with run_at_ms in epoch ms, the envelope may be given as the value `runs` stores (\0, the
--   due in 6 bytes, the envelope: bt_tag): the tag is checked against run_at_ms
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
local delayed, runs, done, stats, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- A local: every read of a global is a table lookup (~100 instructions), 6 a run here.
local ARGV = ARGV
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
local n = nargs / 4
local ids, dues, texts = {}, {}, {}
-- plain[i]: run i's envelope is given alone, not as its stored value (due tag and envelope),
-- so its value is built below (a table the usual batch, all tagged, leaves empty).
local plain = {}
-- A batch of 64 runs or more is first tried by a fast pass: every per-run test but two in one
-- loop, the two (ids are UTF-8, dues are digits) then made once over the concatenation of the
-- batch's ids and of its dues, by C calls (a plain find per byte value >= 128: memchr, ~0.5
-- instructions a byte, where the per-run test costs ~3.7 k a run; one pattern for the dues).
-- Any run that fails a test, or a relative due (+N), sends the batch to the per-run pass
-- below, which names the first bad run, in run order.
-- (Under 64 runs the 128 finds cost more than the per-run tests.)
-- (Concatenations of at most 8 KB: a longer one builds and hashes every byte of pieces of it
-- again, ~3x its length.)
local fast = n >= 64 and pcall(function()
  for i = 1, n do
    local a = 4 * i
    local run_id, run_at, task, env = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    -- (Digits convert by the VM's arithmetic; other text raises, and pcall returns false.)
    local at = run_at + 0
    local b0, b1, b2, b3, b4, b5, b6 = string.byte(env, 1, 7)
    local size = #env
    if b0 == 0 then
      if not b6 or ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6 ~= at then
        error('')
      end
      size = size - 7
    else
      plain[i] = true
    end
    if run_id == '' or #run_id > 512 or task == '' or #task > 256 or size == 0
      or size > max_bytes or at > 253402300799999 then
      error('')
    end
    ids[i], dues[i], texts[i] = run_id, at, run_at
  end
  local byte = {}
  for c = 128, 255 do byte[c] = string.char(c) end
  for s = 1, n, 200 do
    local e = s + 199
    if e > n then e = n end
    local all = table.concat(ids, '', s, e)
    for c = 128, 255 do
      if string.find(all, byte[c], 1, true) then error('') end
    end
    if not string.find(table.concat(texts, '', s, e), '^%d+$') then error('') end
  end
end)
if not fast then
  plain = {} -- (the fast pass may have marked some)
  for i = 1, n do
    local a = 4 * i
    local run_id, run_at, task, env = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    if run_id == '' then
      return redis.error_reply('ERR zsched enqueue: run ' .. (i - 1) .. ': run_id is empty')
    end
    if #run_id > 512 then
      return redis.error_reply('ERR zsched enqueue: run ' .. (i - 1) .. ': run_id is longer than 512 bytes')
    end
    -- (Each C call costs ~1 k instructions: ASCII, the usual case, takes two.)
    if math.max(string.byte(run_id, 1, -1)) >= 128 and not is_utf8(run_id) then
      return redis.error_reply('ERR zsched enqueue: run ' .. (i - 1) .. ': run_id is not valid UTF-8')
    end
    -- Decimal digits only (tonumber would take '1e3', '0x10', ' 5', '-0' too).
    local d, relative = string.match(run_at, '^%+?(%d+)$'), false
    local at = d and d + 0
    -- A relative due (+N) is checked as now + N; the delayed set gets it as a number.
    if d and #d < #run_at then
      at = at + now()
      texts[i], relative = false, true
    else
      texts[i] = run_at
    end
    if not at or at > 253402300799999 then
      return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': run_at_ms must be a whole number of epoch milliseconds >= 0, got ' .. string.sub(run_at, 1, 40))
    end
    ids[i], dues[i] = run_id, at
    if task == '' then
      return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task is empty')
    end
    if #task > 256 then
      return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task name is longer than 256 bytes')
    end
    -- An envelope given as its stored value, for a run_at_ms in epoch ms (it starts with \0,
    -- never a valid envelope's first byte): its due tag is checked against run_at_ms and the
    -- value stored as given, so no value is built here (a 140-byte concatenation costs ~2.5 k
    -- instructions: Redis's Lua hashes every byte of a new string). Relative dues are not looked
    -- at: no client knows the server's time to tag them.
    local size = #env
    if not relative and string.byte(env) == 0 then
      local _, b1, b2, b3, b4, b5, b6 = string.byte(env, 1, 7)
      if not b6 then
        return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope starts with \\0 (a due tag) but is shorter than the tag\'s 7 bytes')
      end
      local tag_due = ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
      if tag_due ~= at then
        return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope starts with \\0 (a due tag) for ' .. string.format('%d', tag_due) .. ', not run_at_ms ' .. string.format('%d', at))
      end
      size = size - 7
    else
      plain[i] = true
    end
    if size == 0 then
      return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is empty')
    end
    if size > max_bytes then
      return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is ' .. size .. ' bytes, over the limit of ' .. max_bytes)
    end
  end
end

-- Dedupe for the whole batch with one read of each container, then write the new runs with
-- one HSET and one ZADD: per run, Redis does no command of its own beyond those (one run:
-- HSETNX is the read of `runs` and its write).
local live, done_at
done_at, err = read('zset', 'ZMSCORE', done, unpack(ids))
if err then return err end
-- One run not done within the window (the one-call enqueue): HSETNX reads and writes `runs` in
-- one command (taken back below when `stats` or the delayed set refuses the run).
local single = n == 1 and not (done_at[1] and tonumber(done_at[1]) > now() - window_ms)
if single then
  local wrote
  wrote, err = read('hash', 'HSETNX', runs, ids[1], plain[1] and bt_tag(dues[1], ARGV[7]) or ARGV[7])
  if err then return err end
  live = {wrote == 0}
else
  live, err = read('hash', 'HMGET', runs, unpack(ids))
  if err then return err end
end
-- The new runs go to bt_add as the arrays ids, dues, texts while every run so far is new (the
-- usual case: no copy); the first duplicate starts copies of the new ones (add_*).
local codes, envs, add_ids, add_dues, add_texts, added, dups_done
-- Each value is bt_tag(due, envelope), inlined (a Lua call a run costs ~500 instructions; the
-- tests check every delayed run's value against the documented tag). Runs due within one span
-- of 65,536 ms share the tag's first 5 bytes (hi5), made once: a string.char of 2 bytes a run.
local hi, hi5
-- The batch is sorted into new runs and duplicates, and the new runs' values written to `runs`
-- (read above: a wrong type was refused there), before the tree and `stats`, which take them
-- back if they refuse the batch. The first pass takes every run that is neither live nor done
-- as new, with no table of the run ids seen (1,000 of them cost ~1.2 k instructions a run, and
-- batches rarely repeat an id): every field HSET writes was not in `runs`, so HSET adds one per
-- distinct run id. Fewer than `added`, and the batch named a run id twice: a second pass sorts
-- it again with `seen` (the first of a repeated id is the run, the later ones duplicates of
-- it) and writes its values again (HSET kept the last value of a repeated id).
local seen
for pass = 1, 2 do
  codes, envs, add_ids, add_dues, add_texts = {}, {}, ids, dues, texts
  added, dups_done = 0, 0
  local e = 0 -- the length of envs
  for i = 1, n do
    local run_id = ids[i]
    if live[i] or (seen and seen[run_id]) or (done_at[i] and tonumber(done_at[i]) > now() - window_ms) then
      if live[i] or (seen and seen[run_id]) then
        codes[i] = 0
      else
        codes[i] = 2
        dups_done = dups_done + 1
      end
      if add_ids == ids then
        add_ids, add_dues, add_texts = {}, {}, {}
        for j = 1, added do add_ids[j], add_dues[j], add_texts[j] = ids[j], dues[j], texts[j] end
      end
    else
      if seen then seen[run_id] = true end
      added = added + 1
      codes[i] = 1
      if single then
        -- (HSETNX wrote it)
      elseif not plain[i] then
        envs[e + 1], envs[e + 2] = run_id, ARGV[4 * i + 3]
        e = e + 2
      else
        local due = dues[i]
        local b6 = due % 256
        local r = (due - b6) / 256
        local b5 = r % 256
        r = r - b5
        if r ~= hi then
          hi = r
          r = r / 256
          local b4 = r % 256
          r = (r - b4) / 256
          local b3 = r % 256
          r = (r - b3) / 256
          local b2 = r % 256
          hi5 = string.char(0, (r - b2) / 256, b2, b3, b4)
        end
        envs[e + 1], envs[e + 2] = run_id, hi5 .. string.char(b5, b6) .. ARGV[4 * i + 3]
        e = e + 2
      end
      if add_ids ~= ids then
        add_ids[added], add_dues[added], add_texts[added] = run_id, dues[i], texts[i]
      end
    end
  end
  if added == 0 or single then break end
  -- Under pcall: a refusal of the first write (OOM, READONLY) is a clean error reply, as for
  -- one run's HSETNX (redis.call would add the script's line to it). A refusal of the second
  -- pass's HSET takes back the first's (the same fields: the batch's distinct new run ids).
  local wrote = redis.pcall('HSET', runs, unpack(envs))
  if type(wrote) == 'table' and wrote['err'] then
    if pass == 2 then redis.call('HDEL', runs, unpack(add_ids, 1, added)) end
    return redis.error_reply(wrote['err'])
  end
  -- (The second pass's HSET adds no field: the loop ends after it.)
  if wrote >= added then break end
  seen = {}
end
local dups = n - added
-- Then a count in `stats` (a wrong type refused there, before the tree), then the tree: its
-- first command reads the index, so a wrong type there is refused before it writes. bt_add
-- tells whether the earliest new run is the new head (wake dispatchers).
local function count(field, by)
  local got = redis.pcall('HINCRBY', stats, field, by)
  if type(got) == 'table' and got['err'] then return nil, wrong_type(stats, 'hash') or redis.error_reply(got['err']) end
  return got
end
local new_head = false
if added > 0 then
  local counted
  -- What this call wrote to `runs`, taken back when `stats` or the tree refuses the batch.
  local function take_back()
    if single then redis.call('HDEL', runs, ids[1]) else redis.call('HDEL', runs, unpack(add_ids, 1, added)) end
  end
  counted, err = count('enqueued', added == 1 and '1' or added)
  if err then
    take_back()
    return err
  end
  local ok, res = pcall(bt_add, delayed, add_ids, add_dues, true, add_texts, added)
  if not ok then
    take_back()
    -- Taken back: the counters only grow, so a field that now holds `added` was not there.
    if counted == added then redis.call('HDEL', stats, 'enqueued') else redis.call('HINCRBY', stats, 'enqueued', -added) end
    return bt_check(delayed, 'enqueue', true) or redis.error_reply(type(res) == 'table' and res['err'] or tostring(res))
  end
  new_head = res
end
if dups > 0 then
  local _, refused = count('duplicate', dups)
  if refused then return refused end
end
-- By kind, for the collector (docs/operations.md): of a live run, of one done in the window.
if dups > dups_done then redis.call('HINCRBY', stats, 'duplicate:live', dups - dups_done) end
if dups_done > 0 then redis.call('HINCRBY', stats, 'duplicate:done', dups_done) end
if new_head then
  -- The earliest new run (only now: the head moves rarely).
  local earliest = add_dues[1]
  for i = 2, added do
    if add_dues[i] < earliest then earliest = add_dues[i] end
  end
  redis.call('PUBLISH', wake, earliest)
end
return codes
