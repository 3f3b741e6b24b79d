-- resume: end a queue's (partition's) pause and wake the dispatchers to move what is due.
-- KEYS[1] control (hash: paused_ms, pause_note)   KEYS[2] wake (pub/sub channel)
-- ARGV[1] now_ms  "" = server TIME
-- Returns 1 resumed, 0 not paused.
-- Publishes now_ms on `wake` when it resumed.
-- Invariant: the queue is paused exactly while `control` has a paused_ms field.
-- Bound: one key, O(1).
local control, wake = KEYS[1], KEYS[2]
local now_ms = tonumber(ARGV[1])
local got = redis.call('TYPE', control)['ok']
if got ~= 'none' and got ~= 'hash' then return redis.error_reply('WRONGTYPE zsched resume: key ' .. control .. ' is a ' .. got .. ', expected a hash') end
if redis.call('HEXISTS', control, 'paused_ms') == 0 then return 0 end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('HDEL', control, 'paused_ms', 'pause_note')
redis.call('PUBLISH', wake, now_ms)
return 1
