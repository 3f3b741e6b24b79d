-- acquire: take a share of a task's limits before its handler starts: a place in its
--   concurrency semaphore and a token of its rate bucket.
-- KEYS[1] limit_holders (zset: entry_id -> hold expiry ms, the semaphore of one limit key)
-- KEYS[2] limit_bucket (hash: tokens, ts_ms, and r:<run_id> -> when a reserved token is due)
-- KEYS[3] limit_waiting (zset: run_id -> when it tries again, ms: the task's deferred runs)
-- ARGV[1] now_ms   "" = server TIME
-- ARGV[2] entry_id   the stream entry of the attempt (the semaphore's member)
-- ARGV[3] run_id
-- ARGV[4] max_concurrency   0 = no semaphore
-- ARGV[5] hold_ms   how long a share lasts unless renewed (a crashed holder's share ends then)
-- ARGV[6] rate_per_s   tokens added per second; 0 = no bucket (a renewal passes 0)
-- ARGV[7] burst   the bucket's capacity (tokens)
-- ARGV[8] defer_ms   the shortest wait when the semaphore is full
-- ARGV[9] max_defer_ms   the longest wait when the semaphore is full
-- Returns {granted, wait_ms, waiting}: granted 1 = the run may start (its share is held, or
--   renewed: a holder's entry id already in the semaphore is granted again); 0 = it must wait
--   wait_ms; waiting = runs of the task deferred by a limit and not started since (entries a
--   minute past their time dropped).
--   Semaphore full: wait defer_ms x (runs waiting / max_concurrency), at most max_defer_ms, so
--   many waiting runs do not poll faster than the slots free up.
--   No token: the run reserves the next free one (the bucket goes below zero) and waits until
--   it is due; back at that time it starts with the token it reserved, so a queue of rated
--   runs is deferred once each, in order, instead of all retrying for every token.
-- Invariant: the semaphore holds at most max_concurrency unexpired entries; starts with a
--   token (taken or reserved) never outrun burst + rate x time; a semaphore denial takes
--   nothing.
-- Bound: O(log n) plus the expired holders and stale waiting entries removed.
local holders, bucket, waiting = KEYS[1], KEYS[2], KEYS[3]
local now_ms, entry, run_id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local max_c, hold_ms, rate, burst, defer_ms, max_defer = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
if not (max_c and hold_ms and rate and burst and defer_ms and max_defer) or max_c < 0 or hold_ms < 1 or rate < 0 or burst < 0 or defer_ms < 0 or max_defer < defer_ms then
  return redis.error_reply('ERR zsched acquire: max_concurrency, hold_ms, rate_per_s, burst, defer_ms and max_defer_ms must be numbers >= 0 (hold_ms >= 1, max_defer_ms >= defer_ms)')
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
    local ahead = redis.call('ZCARD', waiting) - (redis.call('ZSCORE', waiting, run_id) and 1 or 0)
    return wait(math.min(max_defer, defer_ms * math.ceil((ahead + 1) / max_c)))
  end
end
local reserved = nil
if rate > 0 then
  local field = 'r:' .. run_id
  reserved = tonumber(redis.call('HGET', bucket, field))
  if reserved and reserved > now_ms then return wait(reserved - now_ms) end
  if not reserved then
    local b = redis.call('HMGET', bucket, 'tokens', 'ts_ms')
    local tokens, ts = tonumber(b[1]) or burst, tonumber(b[2]) or now_ms
    tokens = math.min(burst, tokens + math.max(0, now_ms - ts) * rate / 1000) - 1
    redis.call('HSET', bucket, 'tokens', tostring(tokens), 'ts_ms', now_ms)
    -- Until it is full again (and a minute more for the reservations' runs to come back).
    redis.call('PEXPIRE', bucket, math.ceil((burst - tokens) * 1000 / rate) + 60000)
    if tokens < 0 then
      -- No token now: this run reserves the next one and comes back when it is due.
      local due = now_ms + math.ceil(-tokens * 1000 / rate)
      redis.call('HSET', bucket, field, due)
      return wait(due - now_ms)
    end
  end
end
if max_c > 0 then
  redis.call('ZADD', holders, now_ms + hold_ms, entry)
  redis.call('PEXPIRE', holders, hold_ms * 2)
end
if reserved then redis.call('HDEL', bucket, 'r:' .. run_id) end
redis.call('ZREM', waiting, run_id)
return {1, 0, redis.call('ZCARD', waiting)}
