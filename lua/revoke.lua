-- revoke: cancel a run wherever it is: a delayed or ready run is removed at once; for a running
--   run a cancel request is written, which the worker holding it acts on (discard.lua).
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- KEYS[2] runs (hash: run_id -> due tag .. envelope)   KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] ready (stream, read by group ARGV[3])        KEYS[5] done (zset: run_id -> done_at_ms)
-- KEYS[6] cancelled (zset: run_id -> cancelled_at_ms)  KEYS[7] stats (hash)
-- KEYS[8] cancel_request (string, this run's: the entry id of the running run; with a TTL)
-- ARGV[1] now_ms   "" = server TIME
-- ARGV[2] run_id
-- ARGV[3] group    the consumer group of the ready stream
-- ARGV[4] dedupe_window_ms   how long records in `cancelled` (and a cancel request) are kept
-- Returns {code, envelope}: 1 cancelled while delayed; 2 cancelled while ready (its stream
--   entry deleted before any worker read it); 3 requested (running: the worker holding it is
--   asked to stop; it ends `cancelled`); 0 no such run; 4 done already; 5 cancelled already.
--   envelope: the removed run's envelope for codes 1 and 2 (so the caller can free a rule's
--   overlap lease), else "". Bad input or a key of the wrong type: error reply, nothing written.
-- Invariant: a run leaves `runs` (and its place in `delayed` or `ready`) in the call that
--   records it in `cancelled`; a running run is only asked, never taken from its worker.
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
-- A run in a batch is {run_id, due_ms[, due_ms as decimal text]}. Numbers in a redis.call
-- are formatted by Redis with %.17g (~2.7 k instructions each): hot paths pass strings.
local BT_MAX = 64
local function bt_key(due, id)
  -- A plain find first: gsub's pattern matcher costs ~200 instructions per byte of the id.
  if string.find(id, '\0', 1, true) then id = (string.gsub(id, '%z', '\0\1')) end
  return string.format('%015d', due) .. id .. '\0\0'
end
local function bt_num(m) return string.sub(m, (string.find(m, '\0\0', 16, true)) + 2) end
-- Lua's `<` on strings is strcoll: byte order in the C locales only (C, POSIX, C.UTF-8, whose
-- order is code point order), while Redis takes LC_COLLATE from its environment. Probed once
-- per call (ISO 14651 locales such as en_US fold case, skip punctuation, sort e-acute before
-- f); where it is not byte order, bt_less compares byte by byte. Probed on first use: most
-- calls compare no strings.
local BT_NATIVE
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
local delayed, runs, entries, ready, done, cancelled, stats, request = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now_ms, run_id, group, window_ms = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
if run_id == '' then return redis.error_reply('ERR zsched revoke: run_id is empty') end
if not window_ms or window_ms < 0 then return redis.error_reply('ERR zsched revoke: dedupe_window_ms must be a number >= 0') end
local err = bt_check(delayed, 'revoke', true)
if err then return err end
for key, want in pairs({[runs] = 'hash', [entries] = 'hash', [ready] = 'stream', [done] = 'zset', [cancelled] = 'zset', [stats] = 'hash', [request] = 'string'}) do
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
  return {code, env}
end

local v = redis.call('HGET', runs, run_id)
if v then
  local due, env = bt_untag(v)
  if due and bt_remove(delayed, run_id, due) == 1 then return record(env, 1) end
  if not due and redis.call('ZREM', delayed .. ':layout2', run_id) == 1 then return record(env, 1) end
  local entry = redis.call('HGET', entries, run_id)
  if entry then
    local row = redis.pcall('XPENDING', ready, group, entry, entry, 1)
    if type(row) == 'table' and not row['err'] and row[1] then
      -- Read by a worker: ask it. The value names the entry, so a later run with the same id
      -- is not cancelled by a request left from this one.
      redis.call('SET', request, entry, 'PX', math.max(window_ms, 1))
      return {3, ''}
    end
    -- Not read by any worker yet: nobody holds it, so it can go now.
    redis.call('XDEL', ready, entry)
    redis.call('HDEL', entries, run_id)
    return record(env, 2)
  end
  -- Live but neither in the tree nor on the stream: cannot happen through the scripts.
  return {0, ''}
end
if redis.call('ZSCORE', done, run_id) then return {4, ''} end
if redis.call('ZSCORE', cancelled, run_id) then return {5, ''} end
return {0, ''}
