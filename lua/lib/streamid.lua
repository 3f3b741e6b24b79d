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
