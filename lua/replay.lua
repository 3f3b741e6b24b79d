-- replay: move dead letters back into the delayed set as fresh runs.
-- KEYS[1] dead (stream)   KEYS[2] runs (hash)   KEYS[3] delayed (zset)   KEYS[4] wake (channel)
-- ARGV[1] now_ms  "" = server TIME
-- ARGV[2..] groups of 3: dead entry id, run_id, envelope (the new envelope, attempt 1;
--   at most 1000 groups)
-- Returns {code, ...} one per group: 1 replayed, 0 no such dead letter,
--   2 refused because a run with that id is live again.
-- Invariant: a replayed run leaves `dead` in the same call that puts it in `delayed`.
-- Bound: 1000 groups per call.
local dead, runs, delayed, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[dead] = 'stream', [runs] = 'hash', [delayed] = 'zset'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched replay: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if (#ARGV - 1) % 3 ~= 0 or #ARGV - 1 > 3000 then
  return redis.error_reply('ERR zsched replay: expected up to 1000 groups of (dead_entry_id, run_id, envelope)')
end
local codes, moved = {}, 0
for i = 2, #ARGV, 3 do
  local entry, run_id, env = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if run_id == '' or env == '' then
    return redis.error_reply('ERR zsched replay: dead letter ' .. entry .. ' has no run id or envelope')
  end
  if #redis.call('XRANGE', dead, entry, entry) == 0 then
    codes[#codes + 1] = 0
  elseif redis.call('HEXISTS', runs, run_id) == 1 then
    codes[#codes + 1] = 2
  else
    redis.call('XDEL', dead, entry)
    redis.call('HSET', runs, run_id, env)
    redis.call('ZADD', delayed, now_ms, run_id)
    moved = moved + 1
    codes[#codes + 1] = 1
  end
end
if moved > 0 then redis.call('PUBLISH', wake, now_ms) end
return codes
