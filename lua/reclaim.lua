-- reclaim: take over pending entries idle longer than the visibility timeout; dead-letter the
--   ones delivered too many times, or hand those of rule fires to the caller to dead-letter.
-- KEYS[1] ready (stream)   KEYS[2] runs (hash: on the stream, its entry id)   KEYS[3] entries (legacy: current block)
-- KEYS[4] dead (stream)    KEYS[5] stats (hash)
-- ARGV[1] now_ms  "" = server TIME     ARGV[2] group     ARGV[3] consumer (the new owner)
-- ARGV[4] min_idle_ms      the visibility timeout
-- ARGV[5] count            at most this many entries examined per call (1..1000)
-- ARGV[6] max_deliveries   an entry delivered more often than this goes to `dead`
-- ARGV[7] cursor           XAUTOCLAIM start id ("0-0" to begin)
-- ARGV[8] hand_over        "1": an entry over max_deliveries whose run id has a rule fire's
--   form (`<schedule_id>@...`: an `@` after its first character) is not dead-lettered here but
--   returned in `over`, owned by `consumer`, which dead-letters it with dead.lua and the rule's
--   lease key, so the lease ends in the call that dead-letters the run (this script is not
--   given the lease keys of entries it has yet to find); absent or "0": the older form, every
--   such entry dead-lettered here, its lease left to the rule's next fire (found stale)
-- Returns {next_cursor, claimed, dead_count, gone_count} (the older form) or
--   {next_cursor, claimed, dead_count, gone_count, over} (hand_over "1"); claimed and over are
--   flat lists of 4 values per entry: entry_id, run_id, envelope, deliveries (over's are past
--   max_deliveries: never run them). gone_count counts pending ids whose entry was deleted
--   (they leave the PEL).
-- Invariant: every reclaimed entry has exactly one owner (`consumer`) afterwards; an entry
--   over max_deliveries leaves the stream only in the call that adds it to `dead` (this one,
--   or the caller's dead.lua for an entry of `over`, which stays pending and live until then:
--   a caller that dies first leaves it to the next reclaim, its lease held by a live run).
-- Bound: `count` entries per call.
-- Counts in `stats`: reclaimed (claimed), dead and dead:max_deliveries (dead-lettered here);
--   an entry of `over` is counted by the dead.lua call that dead-letters it.
-- BEGIN current: a run's entry on the ready stream. Source: lua/lib/current.lua; `make lua`
--   copies it into every script that uses it, and a test keeps the copies equal. Edit it there.
-- While a run is on the stream (ready or running), its value in `runs` is its entry id
-- ("<ms>-<seq>"): dispatch.lua writes it over the due tag and envelope, whose envelope is then
-- in the entry. Runs dispatched by zsched 0.2 kept their tagged value and had the entry id in
-- the `entries` hash instead; dispatch.lua renames that hash to `<entries>:legacy` (`legacy`
-- below) and those runs are read from there (cur_legacy) until they finish.
-- The entry id a value of `runs` names, or nil: a delayed run's tagged value, an envelope of
-- key layout 2, a legacy run (its entry is in `legacy`).
local function cur_entry(v)
  if v and string.find(v, '^%d+%-%d+$') then return v end
end
-- The entry id zsched 0.2 recorded for run_id and the hash it is in: `legacy` (0.2's
-- `entries`, renamed by the first 0.3 dispatch that moves runs), or `entries` itself while it
-- is still 0.2's hash (no 0.3 dispatcher has moved runs yet: the workers were upgraded
-- first). nil when neither has it.
local function cur_legacy(entries, legacy, run_id)
  if redis.call('TYPE', entries)['ok'] == 'hash' then
    -- Newer than `legacy` if both exist (0.2 wrote again after the string was deleted by hand).
    local e = redis.call('HGET', entries, run_id)
    if e then return e, entries end
  end
  local e = redis.call('HGET', legacy, run_id)
  if e then return e, legacy end
end
-- Whether `entry` is the run's current entry: only it ends the run (a stale entry of a run that
-- moved on is acked and deleted, nothing more). Clears the legacy field when it is.
-- v: the run's value in `runs`, if the caller read it.
local function cur_is(runs, entries, legacy, run_id, entry, v)
  if run_id == '' then return false end
  v = v or redis.call('HGET', runs, run_id)
  if not v then return false end
  if v == entry then return true end
  if cur_entry(v) then return false end
  local e, key = cur_legacy(entries, legacy, run_id)
  if e == entry then
    redis.call('HDEL', key, run_id)
    return true
  end
  return false
end
-- The envelope in an entry's `envelope` field, in either shape dispatch.lua writes: plain (the
-- envelope; a `due_ms` field beside it) or tagged (the run's value of `runs` as it was: due
-- tag, then envelope; its first byte 0, which no envelope starts with; docs/protocol.md, "Keys").
local function cur_untag(v)
  if string.byte(v) == 0 and #v >= 7 then return string.sub(v, 8) end
  return v
end
-- END current
local ready, runs, entries, dead, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local legacy = entries .. ':legacy' -- entries of runs dispatched by zsched 0.2 (current block)
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[ready] = 'stream', [runs] = 'hash', [legacy] = 'hash', [dead] = 'stream', [stats] = 'hash'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched reclaim: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
local group, consumer = ARGV[2], ARGV[3]
local min_idle, count, max_deliveries = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local cursor, hand_over = ARGV[7], ARGV[8] == '1'
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if not min_idle or not count or count < 1 or count > 1000 or not max_deliveries then
  return redis.error_reply('ERR zsched reclaim: min_idle_ms, count (1..1000) and max_deliveries must be numbers')
end

local r = redis.call('XAUTOCLAIM', ready, group, consumer, min_idle, cursor, 'COUNT', count)
local claimed, over, n_dead, n_gone, n_claimed = {}, {}, 0, 0, 0
for _, e in ipairs(r[2]) do
  if type(e) ~= 'table' or not e[2] then
    n_gone = n_gone + 1
  else
    local entry, fields = e[1], e[2]
    local run_id, env = '', ''
    for j = 1, #fields, 2 do
      if fields[j] == 'run_id' then run_id = fields[j + 1]
      elseif fields[j] == 'envelope' then env = cur_untag(fields[j + 1]) end
    end
    local p = redis.call('XPENDING', ready, group, entry, entry, 1)
    local deliveries = p[1] and tonumber(p[1][4]) or 1
    if deliveries > max_deliveries and hand_over and string.find(run_id, '.@') then
      -- A rule fire's run (as runids.rule_of reads it; a guess is harmless, dead.lua frees a
      -- lease only for the run it names): the caller dead-letters it with its lease.
      for _, v in ipairs({entry, run_id, env, deliveries}) do over[#over + 1] = v end
    elseif deliveries > max_deliveries then
      redis.call('XACK', ready, group, entry)
      redis.call('XDEL', ready, entry)
      if cur_is(runs, entries, legacy, run_id, entry) then redis.call('HDEL', runs, run_id) end
      redis.call('XADD', dead, '*', 'run_id', run_id,
        'reason', 'delivered ' .. deliveries .. ' times without an ack (max_deliveries ' .. max_deliveries .. ')',
        'envelope', env, 'dead_at_ms', now_ms, 'entry_id', entry)
      n_dead = n_dead + 1
    else
      claimed[#claimed + 1] = entry
      claimed[#claimed + 1] = run_id
      claimed[#claimed + 1] = env
      claimed[#claimed + 1] = deliveries
      n_claimed = n_claimed + 1
    end
  end
end
if r[3] then n_gone = n_gone + #r[3] end
if n_claimed > 0 then redis.call('HINCRBY', stats, 'reclaimed', n_claimed) end
if n_dead > 0 then
  redis.call('HINCRBY', stats, 'dead', n_dead)
  redis.call('HINCRBY', stats, 'dead:max_deliveries', n_dead)
end
if hand_over then return {r[1], claimed, n_dead, n_gone, over} end
return {r[1], claimed, n_dead, n_gone}
