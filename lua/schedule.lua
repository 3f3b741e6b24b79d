-- schedule: create or update a recurring rule, keeping its history.
-- KEYS[1] rules (hash: schedule_id -> rule spec)   KEYS[2] rule_next (zset: schedule_id -> ms)
-- KEYS[3] rule_state (hash: schedule_id -> state)  KEYS[4] rule_catchup (zset)
-- KEYS[5] wake (pub/sub channel): dispatchers sleeping until their next due time hear of the
--   rule at once (published: its next fire) when it is created or changed while active
-- KEYS[6] rule_triggers (hash: schedule_id -> the rule's earlier triggers), optional: without
--   it ARGV[9] is ignored and no trigger history is kept (callers of 5 keys)
-- ARGV[1] schedule_id
-- ARGV[2] spec          the rule (msgpack)
-- ARGV[3] next_ms       its next fire; -1 = not active (paused or ended)
-- ARGV[4] state         the state to write; "" = keep the stored state (create it empty if none)
-- ARGV[5] catchup_head  with a state: the oldest catch-up slot it keeps waiting (a number),
--   or -1 / absent = none; the rule is listed in `rule_catchup` under it (or removed)
-- ARGV[6] expected_spec   optional, with ARGV[7] and ARGV[8]: the rule as the caller read it
-- ARGV[7] expected_next   ("" = no spec / not in rule_next / no state); if any changed since
-- ARGV[8] expected_state  (a dispatcher fired the rule), nothing is written and the reply is 3
-- ARGV[9] triggers   optional, with KEYS[6]: the rule's trigger history to store (msgpack
--   array, at most 16 entries: the caller appends the trigger an edit replaces and drops the
--   oldest), written with the spec or not at all; "" / absent = keep. A created rule starts
--   without one (a history left by a removed rule of the same id is dropped).
-- Returns 1 created, 2 updated, 0 unchanged (same spec, same next fire), 3 changed since the
--   caller read it (compare-and-set failed: read again and retry).
-- Invariant: a rule is in `rule_next` only while active, and at most once; editing a rule
--   changes its spec (so a dispatcher holding the old one fails its compare-and-set); the
--   trigger history changes only in a call that writes the spec.
-- Bound: one rule per call; a trigger history of at most 16 entries (the caller's cap).
local rules, rule_next, rule_state, rule_catchup, wake, triggers_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- Check types before any write: a script is atomic but not transactional.
local want_of = {[rules] = 'hash', [rule_next] = 'zset', [rule_state] = 'hash', [rule_catchup] = 'zset'}
if triggers_key then want_of[triggers_key] = 'hash' end
for key, want in pairs(want_of) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched schedule: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local sid, spec, next_ms, state = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local catchup_head = tonumber(ARGV[5] or -1)
local exp_spec, exp_next, exp_state, triggers = ARGV[6], ARGV[7], ARGV[8], ARGV[9] or ''
if sid == '' or spec == '' or not next_ms or not catchup_head then
  return redis.error_reply('ERR zsched schedule: schedule_id and spec must be non-empty, next_ms and catchup_head numbers')
end

local old = redis.call('HGET', rules, sid)
local old_next = redis.call('ZSCORE', rule_next, sid)
if exp_state and ((old or '') ~= exp_spec or tonumber(old_next or -1) ~= tonumber(exp_next ~= '' and exp_next or -1)
    or (redis.call('HGET', rule_state, sid) or '') ~= exp_state) then
  return 3
end
local same_next = (next_ms < 0 and not old_next) or (old_next and tonumber(old_next) == next_ms)
if old == spec and same_next and state == '' then return 0 end
redis.call('HSET', rules, sid, spec)
if triggers_key then
  if not old then redis.call('HDEL', triggers_key, sid)
  elseif triggers ~= '' then redis.call('HSET', triggers_key, sid, triggers) end
end
if next_ms >= 0 then redis.call('ZADD', rule_next, next_ms, sid) else redis.call('ZREM', rule_next, sid) end
if state ~= '' then
  redis.call('HSET', rule_state, sid, state)
  if catchup_head >= 0 then redis.call('ZADD', rule_catchup, catchup_head, sid) else redis.call('ZREM', rule_catchup, sid) end
elseif redis.call('HEXISTS', rule_state, sid) == 0 then
  redis.call('HSET', rule_state, sid, '')
end
if next_ms >= 0 then redis.call('PUBLISH', wake, next_ms) end
if old then return 2 end
return 1
