-- dead: move runs from the ready stream to the dead-letter stream, with the reason.
-- KEYS[1] ready (stream)   KEYS[2] runs (hash)   KEYS[3] entries (hash: run_id -> entry id)
-- KEYS[4] dead (stream)    KEYS[5] stats (hash)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer
-- ARGV[4..] groups of 4: entry_id, run_id, reason, envelope (the raw bytes as read; run_id may
--   be "" for an entry that could not be decoded; at most 1000 groups)
-- Returns {code, ...} one per group: 1 dead-lettered; 0 refused, pending with another
--   consumer (fenced); 2 refused, pending with no consumer (written already: as ack.lua's 2).
--   An error reply (a malformed entry id, a bad argument) means nothing was written.
-- Invariant: a run leaves the stream only in the call that adds it to `dead`, and only by the
--   consumer that owns its entry; a dead letter keeps the envelope, so it can be replayed.
-- Bound: 1000 groups per call, one XPENDING each.
-- Counts in `stats`: dead, dead:<kind> (the kind read from the reason, see below), fenced, gone.
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
local ready, runs, entries, dead, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [entries] = 'hash', [dead] = 'stream', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched dead: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if (#ARGV - 3) % 4 ~= 0 or #ARGV - 3 > 4000 then
  return redis.error_reply('ERR zsched dead: expected up to 1000 groups of (entry_id, run_id, reason, envelope)')
end
local bad = bad_entry_id('dead', 4, 4)
if bad then return bad end

-- Dead letters by kind, counted in `stats` as dead:<kind>, read from the reason's opening words
-- (the Python and Node workers write them; docs/protocol.md lists them): anything else is other.
local KINDS = {{'^failed after ', 'exhausted'}, {'^failed: ', 'failed'}, {'^unknown task ', 'unknown_task'},
  {'^undecodable envelope', 'undecodable'}, {'^worker error: ', 'worker_error'}}
local function kind_of(reason)
  for _, k in ipairs(KINDS) do
    if string.find(reason, k[1]) then return k[2] end
  end
  return 'other'
end
local by_kind = {}
local codes, moved, fenced, gone = {}, 0, 0, 0
for i = 4, #ARGV, 4 do
  local entry, run_id, reason, env = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  -- Not filtered by consumer: the owner's name tells a fence (0) from an entry gone (2).
  local row = redis.call('XPENDING', ready, group, entry, entry, 1)[1]
  if row and row[2] == consumer then
    redis.call('XACK', ready, group, entry)
    redis.call('XDEL', ready, entry)
    if run_id ~= '' and redis.call('HGET', entries, run_id) == entry then
      redis.call('HDEL', runs, run_id)
      redis.call('HDEL', entries, run_id)
    end
    redis.call('XADD', dead, '*', 'run_id', run_id, 'reason', reason, 'envelope', env,
      'dead_at_ms', now_ms, 'entry_id', entry)
    moved = moved + 1
    local kind = 'dead:' .. kind_of(reason)
    by_kind[kind] = (by_kind[kind] or 0) + 1
    codes[#codes + 1] = 1
  elseif row then
    fenced = fenced + 1
    codes[#codes + 1] = 0
  else
    gone = gone + 1 -- no longer pending: a resend after a lost reply lands here (protocol.md)
    codes[#codes + 1] = 2
  end
end
if moved > 0 then redis.call('HINCRBY', stats, 'dead', moved) end
for kind, n in pairs(by_kind) do redis.call('HINCRBY', stats, kind, n) end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if gone > 0 then redis.call('HINCRBY', stats, 'gone', gone) end
return codes
