-- discard: end held runs whose cancel was requested: acknowledge and delete their stream
--   entries and record them as cancelled (the worker calls it once the handler stopped).
-- KEYS[1] ready (stream)    KEYS[2] runs (hash)    KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] cancelled (zset: run_id -> cancelled_at_ms)   KEYS[5] stats (hash)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4] dedupe_window_ms   records in `cancelled` older than this are trimmed
-- ARGV[5..] pairs: entry_id, run_id (at most 1000)
-- Returns {code, ...} one per pair: 1 discarded; 0 refused, pending with another consumer
--   (fenced); 2 refused, pending with no consumer (written already: as ack.lua's code 2).
-- Invariant: only the consumer that owns a pending entry can end it; a run leaves `runs` in
--   the call that records it in `cancelled`.
-- Bound: 1000 pairs per call, one XPENDING each.
-- BEGIN streamid: entry ids checked before any write. Source: lua/lib/streamid.lua; `make lua`
--   copies it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- XPENDING and XRANGE refuse a malformed id with an error, which would stop a script after the
-- writes of the batch's earlier items: every ARGV[first], ARGV[first + step] ... is checked
-- first. Returns an error reply naming the bad id, or nil.
local function bad_entry_id(script, first, step)
  for i = first, #ARGV, step do
    local e = ARGV[i]
    local ms, seq = string.match(e, '^(%d+)%-(%d+)$')
    if not ((ms and #ms < 20 and #seq < 20) or (string.find(e, '^%d+$') and #e < 20)) then
      return redis.error_reply('ERR zsched ' .. script .. ': entry id ' .. string.sub(e, 1, 40) .. ' is not a stream id')
    end
  end
end
-- END streamid
local ready, runs, entries, cancelled, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [entries] = 'hash', [cancelled] = 'zset', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched discard: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms, group, consumer, window_ms = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
if (#ARGV - 4) % 2 ~= 0 or #ARGV - 4 > 2000 or not window_ms then
  return redis.error_reply('ERR zsched discard: expected a window and up to 1000 (entry_id, run_id) pairs')
end
local bad = bad_entry_id('discard', 5, 2)
if bad then return bad end
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local codes, n = {}, 0
for i = 5, #ARGV, 2 do
  local entry, run_id = ARGV[i], ARGV[i + 1]
  local code = 0
  local row = redis.call('XPENDING', ready, group, entry, entry, 1)[1] -- any owner: 0 or 2
  if row and row[2] == consumer then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    -- Only the run's current entry ends the run (a stale one is acked and deleted, no more).
    if redis.call('HGET', entries, run_id) == entry then
      redis.call('HDEL', runs, run_id)
      redis.call('HDEL', entries, run_id)
      redis.call('ZADD', cancelled, now_ms, run_id)
      n = n + 1
    end
    code = 1
  elseif not row then
    code = 2 -- no longer pending: a resend after a lost reply lands here (protocol.md)
  end
  codes[#codes + 1] = code
end
if n > 0 then
  redis.call('HINCRBY', stats, 'cancelled', n)
  redis.call('ZREMRANGEBYSCORE', cancelled, '-inf', '(' .. (now_ms - window_ms))
  if window_ms > 0 then redis.call('PEXPIRE', cancelled, window_ms) end
end
local refused, gone = 0, 0
for _, c in ipairs(codes) do
  if c == 0 then refused = refused + 1 elseif c == 2 then gone = gone + 1 end
end
if refused > 0 then redis.call('HINCRBY', stats, 'fenced', refused) end
if gone > 0 then redis.call('HINCRBY', stats, 'gone', gone) end
return codes
