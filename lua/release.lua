-- release: hand runs that a stopping worker holds back to the delayed set, due now, same attempt.
-- KEYS[1] ready (stream)   KEYS[2] runs (hash)   KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] delayed (zset)   KEYS[5] wake (pub/sub channel)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4..] pairs: entry_id, run_id (at most 1000)
-- Returns {code, ...} one per pair: 1 released, 0 refused (not the owner).
-- Invariant: a released run leaves the stream in the same call that puts it back in `delayed`;
--   its envelope (and so its attempt number) is unchanged.
-- Bound: 1000 pairs per call.
local ready, runs, entries, delayed, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [entries] = 'hash', [delayed] = 'zset'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched release: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if (#ARGV - 3) % 2 ~= 0 or #ARGV - 3 > 2000 then
  return redis.error_reply('ERR zsched release: expected up to 1000 (entry_id, run_id) pairs')
end

local codes, moved = {}, 0
for i = 4, #ARGV, 2 do
  local entry, run_id = ARGV[i], ARGV[i + 1]
  local owned = redis.call('XPENDING', ready, group, entry, entry, 1, consumer)
  if owned[1] and redis.call('HEXISTS', runs, run_id) == 1 then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    redis.call('HDEL', entries, run_id)
    redis.call('ZADD', delayed, now_ms, run_id)
    moved = moved + 1
    codes[#codes + 1] = 1
  else
    codes[#codes + 1] = 0
  end
end
if moved > 0 then redis.call('PUBLISH', wake, now_ms) end
return codes
