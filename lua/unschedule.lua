-- unschedule: remove a recurring rule with its state, ledger, lease and waiting fire.
-- KEYS[1] rules (hash)   KEYS[2] rule_next (zset)   KEYS[3] rule_state (hash)
-- KEYS[4] rule_catchup (zset)   KEYS[5] rule_waiting (hash)   KEYS[6] ledger (stream)
-- KEYS[7] lease (string)   KEYS[8] rule_triggers (hash), optional (callers of 7 keys)
-- ARGV[1] schedule_id
-- Returns 1 removed, 0 no such rule.
-- Invariant: nothing of a removed rule stays behind to fire (nor its trigger history, with
--   KEYS[8]); runs it already made are untouched.
-- Bound: one rule per call.
local rules, rule_next, rule_state, rule_catchup, waiting, ledger, lease, triggers_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local sid = ARGV[1]
if redis.call('HDEL', rules, sid) == 0 then return 0 end
redis.call('ZREM', rule_next, sid)
redis.call('HDEL', rule_state, sid)
redis.call('ZREM', rule_catchup, sid)
redis.call('HDEL', waiting, sid)
redis.call('DEL', ledger, lease)
if triggers_key then redis.call('HDEL', triggers_key, sid) end
return 1
