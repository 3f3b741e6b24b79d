-- fire: materialise a rule's due fires and record every slot's outcome, if the rule is still
--   exactly as the dispatcher read it (compare-and-set), so replicas fire each slot once.
-- KEYS[1] rules (hash)         KEYS[2] rule_next (zset)     KEYS[3] rule_state (hash)
-- KEYS[4] rule_catchup (zset: schedule_id -> oldest catch-up slot)
-- KEYS[5] runs (hash)          KEYS[6] delayed (zset)       KEYS[7] done (zset)
-- KEYS[8] stats (hash)         KEYS[9] wake (channel)       KEYS[10] rule_waiting (hash)
-- KEYS[11] ledger (stream of this rule)                     KEYS[12] lease (string of this rule)
-- ARGV[1] now_ms "" = server TIME      ARGV[2] schedule_id
-- ARGV[3] expected_spec   ARGV[4] expected_next ("" = not in rule_next)
-- ARGV[5] expected_state  (the stored state as read; "" = none)
-- ARGV[6] new_next (-1 = remove from rule_next)   ARGV[7] new_state
-- ARGV[8] catchup_head (-1 = no catch-up backlog)  ARGV[9] dedupe_window_ms
-- ARGV[10] overlap: allow | skip | queue          ARGV[11] lease_ms
-- ARGV[12] ledger_maxlen   ARGV[13] ledger_max_age_ms (older entries are trimmed, by the
--   server's TIME, which stamps the entry ids; 0 = keep)
-- ARGV[14] n_fires
-- ARGV[15..] n_fires groups of 5: run_id, run_at_ms, slot_ms, envelope, outcome
--   (ran | ran_late); then groups of 4 ledger records decided by policy: slot_ms, outcome,
--   reason, run_id (coalesced, skipped ...). At most 1000 fires and 1000 records.
-- Returns {ok, fired, duplicates, overlap_skipped, queued}; ok = 0 when the compare-and-set
--   failed (nothing written: another dispatcher fired, or the rule was edited).
-- Invariant: each slot gets exactly one ledger outcome and at most one run; a rule with
--   overlap skip|queue has at most one run holding its lease and at most one fire waiting.
-- Bound: 1000 fires and 1000 records per call.
local rules, rule_next, rule_state, catchup, runs, delayed, done, stats, wake, waiting, ledger, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[rules] = 'hash', [rule_next] = 'zset', [rule_state] = 'hash', [catchup] = 'zset', [runs] = 'hash', [delayed] = 'zset', [done] = 'zset', [stats] = 'hash', [waiting] = 'hash', [ledger] = 'stream', [lease] = 'string'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched fire: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local now_ms = tonumber(ARGV[1])
if not now_ms then
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sid = ARGV[2]
local new_next, catchup_head = tonumber(ARGV[6]), tonumber(ARGV[8])
local window_ms, overlap, lease_ms = tonumber(ARGV[9]), ARGV[10], tonumber(ARGV[11])
local maxlen, max_age, n_fires = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
if not (new_next and catchup_head and window_ms and lease_ms and maxlen and max_age and n_fires) then
  return redis.error_reply('ERR zsched fire: numeric arguments expected')
end
local first_rec = 15 + 5 * n_fires
if n_fires > 1000 or first_rec - 1 > #ARGV or (#ARGV - first_rec + 1) % 4 ~= 0 or (#ARGV - first_rec + 1) > 4000 then
  return redis.error_reply('ERR zsched fire: expected n_fires groups of 5 then groups of 4 (at most 1000 each)')
end

-- Compare-and-set: the rule, its next fire and its state are still what the caller read.
local cur_next = redis.call('ZSCORE', rule_next, sid)
local exp_next = tonumber(ARGV[4])
if (redis.call('HGET', rules, sid) or '') ~= ARGV[3]
  or (cur_next and tonumber(cur_next) or nil) ~= exp_next
  or (redis.call('HGET', rule_state, sid) or '') ~= ARGV[5] then
  return {0, 0, 0, 0, 0}
end

local function record(slot, outcome, reason, run_id)
  redis.call('XADD', ledger, 'MAXLEN', '~', maxlen, '*', 'slot_ms', slot, 'outcome', outcome,
    'reason', reason, 'run_id', run_id, 'at_ms', now_ms)
end

local function live_or_done(run_id)
  if redis.call('HEXISTS', runs, run_id) == 1 then return true end
  local d = redis.call('ZSCORE', done, run_id)
  return d and tonumber(d) > now_ms - window_ms
end

local function start(run_id, at, env)
  redis.call('HSET', runs, run_id, env)
  redis.call('ZADD', delayed, at, run_id)
  if overlap ~= 'allow' then redis.call('SET', lease, run_id, 'PX', lease_ms) end
end

-- A lease whose run is no longer live (done or dead, but its worker died before unlease)
-- is stale: free it now rather than wait for its TTL.
local holder0 = redis.call('GET', lease)
if holder0 and redis.call('HEXISTS', runs, holder0) == 0 then redis.call('DEL', lease) end
-- A fire left waiting by a run whose lease expired or went stale goes first.
if overlap == 'queue' and redis.call('EXISTS', lease) == 0 then
  local w = redis.call('HGET', waiting, sid)
  if w then
    local n = tonumber(string.match(w, '^(%d+):'))
    local head = #tostring(n) + 1
    start(string.sub(w, head + 1, head + n), now_ms, string.sub(w, head + n + 1))
    redis.call('HDEL', waiting, sid)
  end
end

-- Policy outcomes are for older slots than the fires: record them first.
for i = first_rec, #ARGV, 4 do
  record(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
end
local fired, dups, skipped, queued, earliest = 0, 0, 0, 0, nil
for i = 15, first_rec - 1, 5 do
  local run_id, at, slot, env, outcome = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local holder = redis.call('GET', lease)
  if live_or_done(run_id) then
    record(slot, 'duplicate', 'run id already live or done', run_id)
    dups = dups + 1
  elseif overlap ~= 'allow' and holder then
    if overlap == 'queue' and redis.call('HEXISTS', waiting, sid) == 0 then
      redis.call('HSET', waiting, sid, #run_id .. ':' .. run_id .. env)
      record(slot, outcome, 'queued behind ' .. holder, run_id)
      queued = queued + 1
    else
      record(slot, 'skipped', 'overlap: ' .. holder .. ' still running', run_id)
      skipped = skipped + 1
    end
  else
    start(run_id, at, env)
    record(slot, outcome, '', run_id)
    fired = fired + 1
    if not earliest or at < earliest then earliest = at end
  end
end
if max_age > 0 then
  local t = redis.call('TIME')
  redis.call('XTRIM', ledger, 'MINID', '~', tonumber(t[1]) * 1000 - max_age)
end

redis.call('HSET', rule_state, sid, ARGV[7])
if new_next >= 0 then redis.call('ZADD', rule_next, new_next, sid) else redis.call('ZREM', rule_next, sid) end
if catchup_head >= 0 then redis.call('ZADD', catchup, catchup_head, sid) else redis.call('ZREM', catchup, sid) end
if fired > 0 then redis.call('HINCRBY', stats, 'fired', fired) end
if dups > 0 then redis.call('HINCRBY', stats, 'fire_duplicate', dups) end
if skipped > 0 then redis.call('HINCRBY', stats, 'overlap_skip', skipped) end
if earliest then
  local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if head[2] and tonumber(head[2]) >= earliest then redis.call('PUBLISH', wake, earliest) end
end
return {1, fired, dups, skipped, queued}
