-- acquire: take a share of a task's limits before its handler starts: a place in its
--   concurrency semaphore and a token of its rate bucket, both or neither.
-- KEYS[1] limit_holders (zset: entry_id -> hold expiry ms, the semaphore of one limit key)
-- KEYS[2] limit_bucket (hash: tokens, ts_ms: the token bucket of one limit key)
-- KEYS[3] limit_waiting (zset: run_id -> when it tries again, ms: the task's deferred runs)
-- ARGV[1] now_ms   "" = server TIME
-- ARGV[2] entry_id   the stream entry of the attempt (the semaphore's member)
-- ARGV[3] run_id
-- ARGV[4] max_concurrency   0 = no semaphore
-- ARGV[5] hold_ms   how long a share lasts unless renewed (a crashed holder's share ends then)
-- ARGV[6] rate_per_s   tokens added per second; 0 = no bucket (a renewal passes 0)
-- ARGV[7] burst   the bucket's capacity (tokens)
-- ARGV[8] defer_ms   how long a run waits when the semaphore is full
-- Returns {granted, wait_ms, waiting}: granted 1 = the run may start (its share is held, or
--   renewed: a holder's entry id already in the semaphore is granted again); 0 = it must wait
--   wait_ms (the time until the next token, or defer_ms); waiting = runs of the task
--   deferred by a limit and not started since (entries over a minute past due dropped).
-- Invariant: the semaphore holds at most max_concurrency unexpired entries; the bucket never
--   holds more than burst tokens; a denied call takes nothing.
-- Bound: O(log n) plus the expired holders and stale waiting entries removed.
local holders, bucket, waiting = KEYS[1], KEYS[2], KEYS[3]
local now_ms, entry, run_id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local max_c, hold_ms, rate, burst, defer_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if not (max_c and hold_ms and rate and burst and defer_ms) or max_c < 0 or hold_ms < 1 or rate < 0 or burst < 0 or defer_ms < 0 then
  return redis.error_reply('ERR zsched acquire: max_concurrency, hold_ms, rate_per_s, burst and defer_ms must be numbers >= 0 (hold_ms >= 1)')
end
for key, want in pairs({[holders] = 'zset', [bucket] = 'hash', [waiting] = 'zset'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched acquire: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('ZREMRANGEBYSCORE', waiting, '-inf', '(' .. (now_ms - 60000))
local function wait(ms)
  ms = math.max(1, math.ceil(ms))
  redis.call('ZADD', waiting, now_ms + ms, run_id)
  redis.call('PEXPIRE', waiting, ms + 60000)
  return {0, ms, redis.call('ZCARD', waiting)}
end
if max_c > 0 then
  -- A crashed holder's share ends with its hold; a reclaimed run keeps its entry id (reused).
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
  if not redis.call('ZSCORE', holders, entry) and redis.call('ZCARD', holders) >= max_c then
    return wait(defer_ms)
  end
end
if rate > 0 then
  local b = redis.call('HMGET', bucket, 'tokens', 'ts_ms')
  local tokens, ts = tonumber(b[1]) or burst, tonumber(b[2]) or now_ms
  tokens = math.min(burst, tokens + math.max(0, now_ms - ts) * rate / 1000)
  if tokens < 1 then
    redis.call('HSET', bucket, 'tokens', tostring(tokens), 'ts_ms', now_ms)
    return wait((1 - tokens) * 1000 / rate)
  end
  redis.call('HSET', bucket, 'tokens', tostring(tokens - 1), 'ts_ms', now_ms)
  -- An idle bucket refills to full in burst / rate seconds; the key may go after that.
  redis.call('PEXPIRE', bucket, math.ceil(burst * 1000 / rate) + 1000)
end
if max_c > 0 then
  redis.call('ZADD', holders, now_ms + hold_ms, entry)
  redis.call('PEXPIRE', holders, hold_ms * 2)
end
redis.call('ZREM', waiting, run_id)
return {1, 0, redis.call('ZCARD', waiting)}
