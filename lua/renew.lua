-- renew: extend the lease of runs a consumer is still working on (reset their idle time).
-- KEYS[1] ready (stream)   KEYS[2] stats (hash)
-- ARGV[1] group   ARGV[2] consumer   ARGV[3..] entry ids (at most 1000)
-- Returns {code, ...} one per entry: 1 renewed, 0 refused (fenced: another consumer owns it
--   now, or it is no longer pending) — the worker then knows it lost the run. `stats` counts
--   the first as `fenced`, the second as `gone` (an outcome written, maybe by a call whose
--   reply was lost: ack.lua's code 2).
--   An error reply (a malformed entry id, a bad argument) means nothing was written.
-- Invariant: a lease is renewed only by the consumer that owns the entry; renewing never
--   moves an entry to another consumer and never raises its delivery count.
-- Bound: 1000 entries per call, one XPENDING each.
-- BEGIN streamid: entry ids checked before any write. Source: lua/lib/streamid.lua; `make lua`
--   copies it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- XPENDING and XRANGE refuse a malformed id with an error, which would stop a script after the
-- writes of the batch's earlier items: every ARGV[first], ARGV[first + step] ... up to
-- ARGV[upto] (default: the last) is checked first. Returns an error reply naming the bad id, or nil.
local function bad_entry_id(script, first, step, upto)
  for i = first, upto or #ARGV, step do
    local e = ARGV[i]
    local ms, seq = string.match(e, '^(%d+)%-(%d+)$')
    if not ((ms and #ms < 20 and #seq < 20) or (string.find(e, '^%d+$') and #e < 20)) then
      return redis.error_reply('ERR zsched ' .. script .. ': entry id ' .. string.sub(e, 1, 40) .. ' is not a stream id')
    end
  end
end
-- END streamid
local ready, stats = KEYS[1], KEYS[2]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched renew: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local group, consumer = ARGV[1], ARGV[2]
if #ARGV - 2 > 1000 then
  return redis.error_reply('ERR zsched renew: at most 1000 entries per call')
end
local bad = bad_entry_id('renew', 3, 1)
if bad then return bad end
local codes, fenced, gone = {}, 0, 0
for i = 3, #ARGV do
  local entry = ARGV[i]
  local row = redis.call('XPENDING', ready, group, entry, entry, 1)[1] -- any owner
  if row and row[2] == consumer then
    redis.call('XCLAIM', ready, group, consumer, 0, entry, 'JUSTID')
    codes[#codes + 1] = 1
  else
    if row then fenced = fenced + 1 else gone = gone + 1 end
    codes[#codes + 1] = 0
  end
end
if fenced > 0 then redis.call('HINCRBY', stats, 'fenced', fenced) end
if gone > 0 then redis.call('HINCRBY', stats, 'gone', gone) end
return codes
