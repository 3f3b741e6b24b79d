-- retry: take runs off the ready stream and put them back in the delayed set for a new attempt.
-- KEYS[1] ready (stream)   KEYS[2] runs (hash)   KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] delayed (zset)   KEYS[5] stats (hash)  KEYS[6] wake (pub/sub channel)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4..] groups of 4: entry_id, run_id, delay_ms, envelope (the next attempt's envelope;
--   at most 1000 groups); the retry is due at now_ms + delay_ms
-- Returns {code, ...} one per group: 1 retried, 0 refused (fenced: not the owner).
-- Invariant: a run leaves the stream only in the call that puts it back in `delayed`, and only
--   by the consumer that owns its entry.
-- Bound: 1000 groups per call.
local ready, runs, entries, delayed, stats, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [entries] = 'hash', [delayed] = 'zset', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched retry: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if (#ARGV - 3) % 4 ~= 0 or #ARGV - 3 > 4000 then
  return redis.error_reply('ERR zsched retry: expected up to 1000 groups of (entry_id, run_id, delay_ms, envelope)')
end

-- Validate first: scripts are not transactional.
for i = 4, #ARGV, 4 do
  local delay = tonumber(ARGV[i + 2])
  if not delay or delay < 0 or ARGV[i + 3] == '' then
    return redis.error_reply('ERR zsched retry: run ' .. ARGV[i + 1] .. ': delay_ms must be a number >= 0 and the envelope non-empty')
  end
end

local codes, moved, fenced, earliest = {}, 0, 0, nil
for i = 4, #ARGV, 4 do
  local entry, run_id, env = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  local at = now_ms + math.floor(tonumber(ARGV[i + 2]))
  local owned = redis.call('XPENDING', ready, group, entry, entry, 1, consumer)
  if owned[1] then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    redis.call('HDEL', entries, run_id)
    redis.call('HSET', runs, run_id, env)
    redis.call('ZADD', delayed, at, run_id)
    if not earliest or at < earliest then earliest = at end
    moved = moved + 1
    codes[#codes + 1] = 1
  else
    fenced = fenced + 1
    codes[#codes + 1] = 0
  end
end
if moved > 0 then redis.call('HINCRBY', stats, 'retried', moved) end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if earliest then
  local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if head[2] and tonumber(head[2]) >= earliest then redis.call('PUBLISH', wake, earliest) end
end
return codes
