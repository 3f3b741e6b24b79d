-- ack: finish runs: acknowledge and delete their stream entries, record their completion.
-- KEYS[1] ready (stream)    KEYS[2] runs (hash)    KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] done (zset: run_id -> done_at_ms)        KEYS[5] stats (hash)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4] dedupe_window_ms   completion records older than this are trimmed
-- ARGV[5] trim_limit         at most this many old completion records removed per call
-- ARGV[6..] pairs: entry_id, run_id (at most 1000)
-- Returns {code, ...} one per pair: 1 acked, 0 refused because `consumer` does not own the
--   entry (fenced: it was reclaimed by another consumer, or already acked).
-- Invariant: only the consumer that owns a pending entry can finish it; a run leaves `runs`
--   in the same call that records it in `done`.
-- Bound: 1000 pairs and trim_limit records per call.
local ready, runs, entries, done, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [entries] = 'hash', [done] = 'zset', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched ack: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
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

local codes, acked, fenced = {}, 0, 0
for i = 6, #ARGV, 2 do
  local entry, run_id = ARGV[i], ARGV[i + 1]
  local owned = redis.call('XPENDING', ready, group, entry, entry, 1, consumer)
  if owned[1] then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    if redis.call('HGET', entries, run_id) == entry then
      redis.call('HDEL', runs, run_id)
      redis.call('HDEL', entries, run_id)
      redis.call('ZADD', done, now_ms, run_id)
    end
    acked = acked + 1
    codes[#codes + 1] = 1
  else
    fenced = fenced + 1
    codes[#codes + 1] = 0
  end
end
if acked > 0 then redis.call('HINCRBY', stats, 'acked', acked) end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if trim_limit > 0 then
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now_ms - window_ms, 'LIMIT', 0, trim_limit)
  if #old > 0 then redis.call('ZREM', done, unpack(old)) end
end
return codes
