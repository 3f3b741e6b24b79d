-- record: keep the outcome details of finished runs (attempts, duration, return value) for the
--   dedupe window; the worker calls it after ack, dead or discard for tasks with keep_result.
-- KEYS[1] outcomes (hash: run_id -> outcome, msgpack)
-- KEYS[2] outcome_times (zset: run_id -> recorded_at_ms)
-- ARGV[1] now_ms  "" = server TIME
-- ARGV[2] dedupe_window_ms   records older than this are removed
-- ARGV[3] trim_limit         at most this many old records removed per call
-- ARGV[4..] pairs: run_id, outcome (at most 1000)
-- Returns the number of outcomes recorded.
-- Invariant: a run id is in `outcomes` exactly when it is in `outcome_times`.
-- Bound: 1000 pairs and trim_limit old records per call.
local outcomes, times = KEYS[1], KEYS[2]
for key, want in pairs({[outcomes] = 'hash', [times] = 'zset'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched record: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms, window_ms, trim_limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if (#ARGV - 3) % 2 ~= 0 or #ARGV - 3 > 2000 or not window_ms or not trim_limit then
  return redis.error_reply('ERR zsched record: expected a window, a trim limit and up to 1000 (run_id, outcome) pairs')
end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local n = (#ARGV - 3) / 2
if n > 0 then
  local fields, scores = {}, {}
  for i = 1, n do
    local run_id, outcome = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
    if run_id == '' then return redis.error_reply('ERR zsched record: run ' .. (i - 1) .. ': run_id is empty') end
    fields[#fields + 1], fields[#fields + 2] = run_id, outcome
    scores[#scores + 1], scores[#scores + 2] = now_ms, run_id
  end
  redis.call('HSET', outcomes, unpack(fields))
  redis.call('ZADD', times, unpack(scores))
  -- Every record is younger than the newest: the keys may go a window after the last one.
  if window_ms > 0 then
    redis.call('PEXPIRE', outcomes, window_ms)
    redis.call('PEXPIRE', times, window_ms)
  end
end
if trim_limit > 0 then
  local old = redis.call('ZRANGEBYSCORE', times, '-inf', '(' .. (now_ms - window_ms), 'LIMIT', 0, trim_limit)
  if #old > 0 then
    redis.call('HDEL', outcomes, unpack(old))
    redis.call('ZREM', times, unpack(old))
  end
end
return n
