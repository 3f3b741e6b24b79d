-- dispatch: move due runs from the delayed set onto the ready stream.
-- KEYS[1] delayed (zset: run_id -> run_at_ms)   KEYS[2] runs (hash: run_id -> envelope)
-- KEYS[3] ready (stream; fields run_id, envelope, due_ms)
-- KEYS[4] entries (hash: run_id -> entry id)   KEYS[5] stats (hash)
-- ARGV[1] now_ms       "" = server TIME; tests pass a value
-- ARGV[2] limit        max runs moved by this call (1..1000)
-- ARGV[3] max_backlog  hold back while XLEN ready >= this; 0 = no limit
-- Returns {moved, next_due_ms, now_ms, held, busy_us, run_at_ms...}: next_due_ms is the
--   earliest run_at left in `delayed` (-1 when empty); held is 1 when the backlog limit
--   stopped the move; busy_us is how long this call ran in Redis when it moved runs (server
--   TIME at its start and end; 0 on the idle pass), so the caller can size its calls on
--   Redis's own time; then the run_at_ms of each moved run, for lag metrics.
-- Invariant: a run leaves `delayed` only in the call that adds it to `ready`; a run id in
--   `delayed` without an envelope (impossible through the scripts) is dropped and counted.
-- Bound: `limit` runs per call (one XADD each, a fixed number of other commands).
local delayed, runs, ready, entries, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional. `delayed` is checked
-- first, the others only once there is something to move (the idle pass writes nothing).
local function wrong_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched dispatch: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local err = wrong_type(delayed, 'zset')
if err then return err end
local now_ms = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_backlog = tonumber(ARGV[3])
local function micros(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local started_us = nil
if not now_ms then
  local t = redis.call('TIME')
  started_us = micros(t)
  now_ms = math.floor(started_us / 1000)
end
if not limit or limit < 1 or limit > 1000 or not max_backlog then
  return redis.error_reply('ERR zsched dispatch: limit must be 1..1000 and max_backlog a number')
end

local out = {0, -1, now_ms, 0, 0}
-- Nothing due (the idle case): answer from the head alone, before the backlog check, so an
-- idle dispatcher costs Redis four commands per pass (EVALSHA, TYPE, TIME, ZRANGE).
local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if not head[2] or tonumber(head[2]) > now_ms then
  if head[2] then out[2] = tonumber(head[2]) end
  return out
end
for key, want in pairs({[runs] = 'hash', [ready] = 'stream', [entries] = 'hash', [stats] = 'hash'}) do
  err = wrong_type(key, want)
  if err then return err end
end
if not started_us then started_us = micros(redis.call('TIME')) end

if max_backlog > 0 then
  local room = max_backlog - redis.call('XLEN', ready)
  if room <= 0 then
    out[4] = 1
    limit = 0
  elseif room < limit then
    limit = room
  end
end

if limit > 0 then
  -- The due runs are the lowest `n` ranks of `delayed`: read them, then cut them with one
  -- ZREMRANGEBYRANK and fetch/record their envelopes and entries with one call each, so the
  -- per-run work inside Redis is a single XADD.
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
  local n = #due / 2
  if n > 0 then
    local ids = {}
    for i = 1, n do ids[i] = due[2 * i - 1] end
    local envs = redis.call('HMGET', runs, unpack(ids))
    local recorded, orphans = {}, 0
    for i = 1, n do
      local env = envs[i]
      if env then
        local entry = redis.call('XADD', ready, '*', 'run_id', ids[i], 'envelope', env, 'due_ms', due[2 * i])
        recorded[#recorded + 1] = ids[i]
        recorded[#recorded + 1] = entry
        out[#out + 1] = tonumber(due[2 * i])
      else
        orphans = orphans + 1
      end
    end
    redis.call('ZREMRANGEBYRANK', delayed, 0, n - 1)
    if #recorded > 0 then redis.call('HSET', entries, unpack(recorded)) end
    if orphans > 0 then redis.call('HINCRBY', stats, 'orphan', orphans) end
    out[1] = #out - 5
    if out[1] > 0 then redis.call('HINCRBY', stats, 'dispatched', out[1]) end
  end
end
head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
out[5] = math.max(0, micros(redis.call('TIME')) - started_us)
return out
