-- dispatch: move due runs from the delayed set onto the ready stream.
-- KEYS[1] delayed (zset: run_id -> run_at_ms)   KEYS[2] runs (hash: run_id -> envelope)
-- KEYS[3] ready (stream; fields run_id, envelope, due_ms)
-- KEYS[4] entries (hash: run_id -> entry id)   KEYS[5] stats (hash)
-- ARGV[1] now_ms       "" = server TIME; tests pass a value
-- ARGV[2] limit        max runs moved by this call (1..1000)
-- ARGV[3] max_backlog  hold back while XLEN ready >= this; 0 = no limit
-- Returns {moved, next_due_ms, now_ms, held, run_at_ms...}: next_due_ms is the earliest
--   run_at left in `delayed` (-1 when empty); held is 1 when the backlog limit stopped the
--   move; then the run_at_ms of each moved run, for lag metrics.
-- Invariant: a run leaves `delayed` only in the call that adds it to `ready`; a run id in
--   `delayed` without an envelope (impossible through the scripts) is dropped and counted.
-- Bound: `limit` runs per call.
local delayed, runs, ready, entries, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[delayed] = 'zset', [runs] = 'hash', [ready] = 'stream', [entries] = 'hash', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched dispatch: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_backlog = tonumber(ARGV[3])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if not limit or limit < 1 or limit > 1000 or not max_backlog then
  return redis.error_reply('ERR zsched dispatch: limit must be 1..1000 and max_backlog a number')
end

local held = 0
if max_backlog > 0 then
  local room = max_backlog - redis.call('XLEN', ready)
  if room <= 0 then
    held = 1
    limit = 0
  elseif room < limit then
    limit = room
  end
end

local out = {0, -1, now_ms, held}
if limit > 0 then
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
  local ids = {}
  for i = 1, #due, 2 do
    local run_id = due[i]
    local env = redis.call('HGET', runs, run_id)
    if env then
      local entry = redis.call('XADD', ready, '*', 'run_id', run_id, 'envelope', env, 'due_ms', due[i + 1])
      redis.call('HSET', entries, run_id, entry)
      out[#out + 1] = tonumber(due[i + 1])
    else
      redis.call('HINCRBY', stats, 'orphan', 1)
    end
    ids[#ids + 1] = run_id
  end
  if #ids > 0 then
    redis.call('ZREM', delayed, unpack(ids))
  end
  out[1] = #out - 4
  if out[1] > 0 then redis.call('HINCRBY', stats, 'dispatched', out[1]) end
end
local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
return out
