-- pause: pause a queue (partition): dispatch.lua moves nothing onto the ready stream until
--   resume.lua; runs wait in the delayed set and rule fires are still materialised there.
-- KEYS[1] control (hash: paused_ms, pause_note)
-- ARGV[1] now_ms  "" = server TIME
-- ARGV[2] note    why (kept with the time; "" = none)
-- Returns 1 paused now, 0 already paused (its time and note kept).
-- Invariant: the queue is paused exactly while `control` has a paused_ms field.
-- Bound: one key, O(1).
local control = KEYS[1]
local now_ms, note = tonumber(ARGV[1]), ARGV[2]
local got = redis.call('TYPE', control)['ok']
if got ~= 'none' and got ~= 'hash' then return redis.error_reply('WRONGTYPE zsched pause: key ' .. control .. ' is a ' .. got .. ', expected a hash') end
if #note > 500 then return redis.error_reply('ERR zsched pause: note is longer than 500 bytes') end
if redis.call('HEXISTS', control, 'paused_ms') == 1 then return 0 end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('HSET', control, 'paused_ms', now_ms, 'pause_note', note)
return 1
