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
-- The run's current entry id (from `runs`, else cur_legacy), or nil when it is not on the
-- stream. v: its value in `runs` (false/nil: none).
local function cur_of(entries, legacy, run_id, v)
  if not v then return nil end
  return cur_entry(v) or (cur_legacy(entries, legacy, run_id))
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
-- Entry ids of ARGV[first], ARGV[first + step] ... up to ARGV[upto] (default: the last) as
-- Redis writes them ("<ms>-<seq>", no leading zeros): cur_is compares them as strings, while
-- XPENDING also takes "5" or "05-0" for the entry it names "5-0", so another spelling would
-- read as a stale entry (acked, its run left live). An error reply naming the first one
-- spelled otherwise, or nil; checked before any write (after bad_entry_id).
local function cur_spelling(script, first, step, upto)
  for i = first, upto or #ARGV, step do
    local e = ARGV[i]
    if not string.find(e, '^%d+%-%d+$') or string.find(e, '^0%d') or string.find(e, '%-0%d') then
      return redis.error_reply('ERR zsched ' .. script .. ': entry id ' .. string.sub(e, 1, 40) .. ' is not written as Redis writes it (<ms>-<seq>, no leading zeros)')
    end
  end
end
-- The envelope in an entry's `envelope` field, in either shape dispatch.lua writes: plain (the
-- envelope; a `due_ms` field beside it) or tagged (the run's value of `runs` as it was: due
-- tag, then envelope; its first byte 0, which no envelope starts with; docs/protocol.md, "Keys").
local function cur_untag(v)
  if string.byte(v) == 0 and #v >= 7 then return string.sub(v, 8) end
  return v
end
-- The envelope of stream entry `entry` (nil when it is gone), in either shape (cur_untag).
local function cur_envelope(ready, entry)
  local row = redis.call('XRANGE', ready, entry, entry)[1]
  if not row then return nil end
  local f = row[2]
  for j = 1, #f, 2 do
    if f[j] == 'envelope' then return cur_untag(f[j + 1]) end
  end
end
-- END current
