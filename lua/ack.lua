-- ack: finish runs: acknowledge and delete their stream entries, record their completion.
-- KEYS[1] ready (stream)    KEYS[2] runs (hash)    KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] done (zset: run_id -> done_at_ms)        KEYS[5] stats (hash)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4] dedupe_window_ms   completion records older than this are trimmed
-- ARGV[5] trim_limit         at most this many old completion records removed per call
-- ARGV[6..] pairs: entry_id, run_id (at most 1000), best in stream order (ascending ids)
-- Returns {code, ...} one per pair: 1 acked, 0 refused because `consumer` does not own the
--   entry (fenced: it was reclaimed by another consumer, or already acked).
-- Invariant: only the consumer that owns a pending entry can finish it; an entry leaves the
--   stream in the call that acknowledges it; a run leaves `runs` in the same call that
--   records it in `done`. `done` expires dedupe_window_ms after the
--   last completion (every record in it is then older than the window).
-- Bound: 1000 pairs and trim_limit records per call; the ownership check reads at most
--   2 * pairs + 1000 pending entries between the first and the last pair's entry, then checks
--   the rest one by one (pairs in stream order are the fast case); the trim of the
--   acknowledged prefix (calls of 16 entries or more) reads XINFO GROUPS and one XPENDING
--   summary per group (at most 4 groups of 256 consumers, else no trim) and frees whole
--   stream nodes only (XTRIM ~, Redis's default LIMIT: 100 nodes).
local ready, runs, entries, done, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional. `ready` and
-- `entries` are checked by their first reads (pcall), both before the first write.
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
if (#ARGV - 5) % 2 ~= 0 or #ARGV - 5 > 2000 or not window_ms or not trim_limit then
  return redis.error_reply('ERR zsched ack: expected window, trim limit and up to 1000 (entry_id, run_id) pairs')
end

local n = (#ARGV - 5) / 2
local ids, run_ids = {}, {}
for i = 1, n do
  ids[i], run_ids[i] = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
end

-- Ownership, for the whole batch at once: page through this consumer's pending entries
-- between the batch's first and last id. Callers pass the pairs in stream order (the Python
-- wrapper sorts them), and a worker acks entries it read together, so the range holds little
-- else. An id not found there (out of order, past the budget, or not ours) is checked alone,
-- so the order only costs time. No id is parsed here: a pattern match costs ~9 k instructions
-- an id, as much as the XPENDING.
local pending = {}
if n > 0 then
  local start, budget = ids[1], 2 * n + 1000
  while budget > 0 do
    local page, err = read(ready, 'stream', 'XPENDING', ready, group, start, ids[n], 1000, consumer)
    if err then return err end
    for _, p in ipairs(page) do pending[p[1]] = true end
    budget = budget - #page
    if #page < 1000 then break end
    start = '(' .. page[#page][1]
  end
end
local function owns(id)
  if pending[id] then return true end
  return redis.call('XPENDING', ready, group, id, id, 1, consumer)[1] ~= nil
end

local codes, owned, owned_runs, taken, fenced, o = {}, {}, {}, {}, 0, 0
for i = 1, n do
  local id = ids[i]
  if not taken[id] and owns(id) then
    taken[id] = true
    o = o + 1 -- a counter, not #t: the length operator is a search on every append
    owned[o], owned_runs[o] = id, run_ids[i]
    codes[i] = 1
  else
    fenced = fenced + 1
    codes[i] = 0
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
  if keep_ms then return string.format('%d-%d', keep_ms, keep_seq) end
end

-- A run finishes only through its current entry (a stale entry of a run that moved on is
-- acked and deleted, nothing more).
local current, err = {}, nil
if #owned > 0 then current, err = read(entries, 'hash', 'HMGET', entries, unpack(owned_runs)) end
if err then return err end
if #owned > 0 then
  redis.call('XACK', ready, group, unpack(owned))
  -- Delete the acknowledged entries. First the stream nodes that hold only entries no group
  -- needs any more (XTRIM MINID ~ frees whole nodes, an entry costs it nothing), then XDEL
  -- the owned ones: an entry already gone costs XDEL one lookup, one still there a walk of
  -- its node from the start (up to stream-node-max-entries, 100). The stream keeps exactly
  -- the entries it kept before (no acknowledged entry stays), so XLEN and memory are as before.
  -- Worth its three commands only when the call may finish a node (100 entries): from
  -- TRIM_FROM owned entries on (measured: at 10 a call the trim costs more than it saves).
  local keep = #owned >= TRIM_FROM and keep_from()
  if keep then redis.call('XTRIM', ready, 'MINID', '~', keep) end
  redis.call('XDEL', ready, unpack(owned))
  -- The score as a string once: a number is formatted again for every argument it is in.
  local finished, records, f, at = {}, {}, 0, string.format('%d', now_ms)
  for i = 1, #owned do
    if current[i] == owned[i] then
      f = f + 1
      finished[f] = owned_runs[i]
      records[2 * f - 1], records[2 * f] = at, owned_runs[i]
    end
  end
  if #finished > 0 then
    redis.call('HDEL', runs, unpack(finished))
    redis.call('HDEL', entries, unpack(finished))
    redis.call('ZADD', done, unpack(records))
    -- Every record is younger than the newest one: when no run finishes for a whole window
    -- they have all expired, so the key may go (memory returns to its baseline after a drain).
    if window_ms > 0 then redis.call('PEXPIRE', done, window_ms) end
  end
  redis.call('HINCRBY', stats, 'acked', #owned)
end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if trim_limit > 0 then
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now_ms - window_ms, 'LIMIT', 0, trim_limit)
  if #old > 0 then redis.call('ZREM', done, unpack(old)) end
end
return codes
