-- hold: the former name of extend.lua, kept for clients that load it by this name: the same
--   script (same KEYS, ARGV and replies). A rule's run waits for its retry in the delayed
--   set: keep its overlap lease, without a TTL, for the whole wait (a lease given a TTL by an
--   older fire.lua loses it here).
-- KEYS[1] lease (string of this rule)   KEYS[2] runs (hash)
-- ARGV[1] run_id (the run that waits)   ARGV[2] ttl_ms (checked, unused: the lease has no TTL)
-- Returns 1 held, 0 not held (no lease: the rule was removed or the lease lapsed; another
--   run holds it; or this run is no longer live).
-- Invariant: a lease names one live run of its rule; hold only extends this run's own lease
--   (never takes one, so a removed rule's lease is not brought back).
-- Bound: one lease per call.
local lease, runs = KEYS[1], KEYS[2]
local run_id, ttl_ms = ARGV[1], tonumber(ARGV[2])
for key, want in pairs({[lease] = 'string', [runs] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched hold: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
if run_id == '' or not ttl_ms or ttl_ms < 1 then
  return redis.error_reply('ERR zsched hold: run_id must be non-empty and ttl_ms a number >= 1')
end
if redis.call('HEXISTS', runs, run_id) == 0 then return 0 end
if redis.call('GET', lease) ~= run_id then return 0 end
redis.call('PERSIST', lease)
return 1
