-- enqueue: add runs to the delayed set, unless their run id is live or recently done.
-- KEYS[1] delayed (zset: run_id -> run_at_ms)   KEYS[2] runs (hash: run_id -> envelope)
-- KEYS[3] done (zset: run_id -> done_at_ms)     KEYS[4] stats (hash: counter -> n)
-- KEYS[5] wake (pub/sub channel, tagged like the keys)
-- ARGV[1] now_ms            "" = server TIME; tests pass a value
-- ARGV[2] dedupe_window_ms  a done run id stays a duplicate this long
-- ARGV[3] max_envelope_bytes
-- ARGV[4..] groups of 4: run_id, run_at_ms, task, envelope (one group per run; at most 1000);
--   run_at_ms may be "+N": N ms after now (server TIME), so relative delays ignore client skew
-- Returns {code, ...} one per run: 1 enqueued, 0 duplicate of a live run,
--   2 duplicate of a run done within the window. Bad input: error reply naming the run and
--   the field; nothing of the batch is written.
-- Publishes the earliest new run_at_ms on `wake` when it is the new head of `delayed`.
-- Invariant: a run id is live in `runs` at most once; a run enters `delayed` and `runs` together.
-- Bound: 1000 runs per call.
local delayed, runs, done, stats, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional. `stats` is checked
-- here; `delayed`, `runs` and `done` by the reads below (pcall), which all come before a write.
-- (Each redis.call is a fixed cost: one enqueue() runs 7 of them, not 11.)
local function wrong_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched enqueue: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local function read(want, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then
    return nil, wrong_type(select(2, ...), want) or redis.error_reply(reply['err'])
  end
  return reply
end
local err = wrong_type(stats, 'hash')
if err then return err end
local now_ms = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local nargs = #ARGV - 3
-- Server time is read only when needed (a relative run_at, a recently done run id).
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
if not window_ms or not max_bytes then
  return redis.error_reply('ERR zsched enqueue: dedupe_window_ms and max_envelope_bytes must be numbers')
end
if nargs % 4 ~= 0 or nargs == 0 then
  return redis.error_reply('ERR zsched enqueue: expected groups of 4 arguments (run_id, run_at_ms, task, envelope)')
end
if nargs > 4000 then
  return redis.error_reply('ERR zsched enqueue: at most 1000 runs per call')
end

-- Run ids are text to workers and clients in every language: bytes that are not UTF-8 would
-- come back altered and strand the run. ASCII (the usual case) costs one find.
local function is_utf8(s)
  if not string.find(s, '[\128-\255]') then return true end
  local i, n = 1, #s
  while i <= n do
    local c, len, lo, hi = string.byte(s, i), 0, 0x80, 0xBF
    if c < 0x80 then len = 0
    elseif c >= 0xC2 and c <= 0xDF then len = 1
    elseif c >= 0xE0 and c <= 0xEF then
      len = 2
      if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      len = 3
      if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
    else return false end
    for j = 1, len do
      local b = string.byte(s, i + j)
      if not b or b < lo or b > hi then return false end
      lo, hi = 0x80, 0xBF
    end
    i = i + len + 1
  end
  return true
end

-- Validate the whole batch before writing anything: scripts are not transactional.
for i = 4, #ARGV, 4 do
  local run_id, run_at, task, env = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = (i - 4) / 4
  if run_id == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is empty')
  end
  if #run_id > 512 then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is longer than 512 bytes')
  end
  if not is_utf8(run_id) then
    return redis.error_reply('ERR zsched enqueue: run ' .. n .. ': run_id is not valid UTF-8')
  end
  local at
  if string.sub(run_at, 1, 1) == '+' then at = tonumber(string.sub(run_at, 2)) else at = tonumber(run_at) end
  if not at or at ~= at or at < 0 or at ~= math.floor(at) or at > 253402300799999 then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': run_at_ms must be a whole number of epoch milliseconds >= 0, got ' .. string.sub(run_at, 1, 40))
  end
  if task == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task is empty')
  end
  if #task > 256 then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': task name is longer than 256 bytes')
  end
  if env == '' then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is empty')
  end
  if #env > max_bytes then
    return redis.error_reply('ERR zsched enqueue: run ' .. run_id .. ': envelope is ' .. #env .. ' bytes, over the limit of ' .. max_bytes)
  end
end

-- Dedupe for the whole batch with one read of each container, then write the new runs with
-- one HSET and one ZADD: per run, Redis does no command of its own beyond those.
local n = nargs / 4
local ids = {}
for i = 1, n do ids[i] = ARGV[4 * i] end
local live, done_at, head
live, err = read('hash', 'HMGET', runs, unpack(ids))
if err then return err end
done_at, err = read('zset', 'ZMSCORE', done, unpack(ids))
if err then return err end
-- The head before the write: a new run at or before it is the new head (wake dispatchers).
head, err = read('zset', 'ZRANGE', delayed, 0, 0, 'WITHSCORES')
if err then return err end
local codes, seen, envs, scores = {}, {}, {}, {}
local added, dups = 0, 0
local earliest = nil
for i = 1, n do
  local run_id, run_at = ids[i], ARGV[4 * i + 1]
  local code
  if live[i] or seen[run_id] then
    code = 0
  elseif done_at[i] and tonumber(done_at[i]) > now() - window_ms then
    code = 2
  else
    local at
    if string.sub(run_at, 1, 1) == '+' then at = now() + tonumber(string.sub(run_at, 2)) else at = tonumber(run_at) end
    seen[run_id] = true
    envs[#envs + 1] = run_id
    envs[#envs + 1] = ARGV[4 * i + 3]
    scores[#scores + 1] = at
    scores[#scores + 1] = run_id
    if not earliest or at < earliest then earliest = at end
    code = 1
  end
  if code == 1 then added = added + 1 else dups = dups + 1 end
  codes[i] = code
end
if added > 0 then
  redis.call('HSET', runs, unpack(envs))
  redis.call('ZADD', delayed, unpack(scores))
  redis.call('HINCRBY', stats, 'enqueued', added)
end
if dups > 0 then redis.call('HINCRBY', stats, 'duplicate', dups) end
if earliest and (not head[2] or tonumber(head[2]) >= earliest) then
  redis.call('PUBLISH', wake, earliest)
end
return codes
