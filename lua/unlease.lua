-- unlease: a rule's run finished (done or dead): free the rule's overlap lease and start the
--   fire that waited for it (overlap = queue).
-- KEYS[1] lease (string of this rule)   KEYS[2] rule_waiting (hash)   KEYS[3] runs (hash)
-- KEYS[4] delayed (zset)                KEYS[5] wake (channel)
-- ARGV[1] now_ms "" = server TIME   ARGV[2] schedule_id   ARGV[3] run_id (the finished run)
-- ARGV[4] lease_ms (the started fire's lease)
-- Returns {released, started_run_id}: released 1 if this run held the lease; started_run_id
--   is the waiting fire now due, or "".
-- Invariant: only the run holding a lease frees it; a waiting fire starts in the same call
--   that hands it the lease, so at most one run of the rule holds it.
-- Bound: one rule per call.
local lease, waiting, runs, delayed, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
for key, want in pairs({[lease] = 'string', [waiting] = 'hash', [runs] = 'hash', [delayed] = 'zset'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched unlease: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sid, run_id, lease_ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
local released = 0
if redis.call('GET', lease) == run_id then
  redis.call('DEL', lease)
  released = 1
end
local started = ''
if redis.call('EXISTS', lease) == 0 then
  local w = redis.call('HGET', waiting, sid)
  if w then
    local n = tonumber(string.match(w, '^(%d+):'))
    local head = #tostring(n) + 1
    started = string.sub(w, head + 1, head + n)
    redis.call('HSET', runs, started, string.sub(w, head + n + 1))
    redis.call('ZADD', delayed, now_ms, started)
    redis.call('SET', lease, started, 'PX', lease_ms)
    redis.call('HDEL', waiting, sid)
    redis.call('PUBLISH', wake, now_ms)
  end
end
return {released, started}
