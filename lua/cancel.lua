-- cancel: remove a run that is still waiting in the delayed set.
-- KEYS[1] delayed (zset)   KEYS[2] runs (hash)
-- ARGV[1] run_id
-- Returns 1 cancelled, 0 no such live run, 2 not cancellable (already on the ready stream).
-- Invariant: a run leaves `delayed` and `runs` together.
-- Bound: one run per call.
local delayed, runs = KEYS[1], KEYS[2]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[delayed] = 'zset', [runs] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched cancel: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local run_id = ARGV[1]
if redis.call('ZREM', delayed, run_id) == 1 then
  redis.call('HDEL', runs, run_id)
  return 1
end
if redis.call('HEXISTS', runs, run_id) == 1 then return 2 end
return 0
