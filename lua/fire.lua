-- fire: materialise a rule's due fires and record every slot's outcome, if the rule is still
--   exactly as the dispatcher read it (compare-and-set), so replicas fire each slot once.
-- KEYS[1] rules (hash)         KEYS[2] rule_next (zset)     KEYS[3] rule_state (hash)
-- KEYS[4] rule_catchup (zset: schedule_id -> oldest catch-up slot)
-- KEYS[5] runs (hash)          KEYS[6] delayed (B-tree root) KEYS[7] done (zset)
-- KEYS[8] stats (hash)         KEYS[9] wake (channel)       KEYS[10] rule_waiting (hash)
-- KEYS[11] ledger (stream of this rule)                     KEYS[12] lease (string of this rule)
-- ARGV[1] now_ms "" = server TIME      ARGV[2] schedule_id
-- ARGV[3] expected_spec   ARGV[4] expected_next ("" = not in rule_next)
-- ARGV[5] expected_state  (the stored state as read; "" = none)
-- ARGV[6] new_next (-1 = remove from rule_next)   ARGV[7] new_state
-- ARGV[8] catchup_head (-1 = no catch-up backlog)  ARGV[9] dedupe_window_ms
-- ARGV[10] overlap: allow | skip | queue
-- ARGV[11] lease_ms (checked, unused: the lease has no TTL, it lasts while its run lives)
-- ARGV[12] ledger_maxlen   ARGV[13] ledger_max_age_ms (older entries are trimmed, by the
--   server's TIME, which stamps the entry ids; 0 = keep)
-- ARGV[14] n_fires
-- ARGV[15..] n_fires groups of 5: run_id, run_at_ms, slot_ms, envelope, outcome
--   (ran | ran_late | replay: a catch-up replay, recorded ran_late); then groups of 5 ledger
--   records decided by policy: slot_ms, outcome, reason, run_id, last_ms (coalesced, skipped
--   ...); last_ms > slot_ms makes one record of every slot in [slot_ms, last_ms] (a long
--   pause), written with a last_ms field; its run_id element is then its number of slots
--   (the entry's run_id stays empty, a `slots` field holds it; "" = not given: counted as one).
--   At most 1000 fires and 1000 records.
-- Returns {ok, fired, duplicates, overlap_skipped, queued}; ok = 0 when the compare-and-set
--   failed (nothing written: another dispatcher fired, or the rule was edited, or a replay
--   would start while a live run holds the lease of an overlap skip|queue rule).
-- Invariant: each slot gets exactly one ledger outcome and at most one run; a rule with
--   overlap skip|queue has at most one run holding its lease and at most one fire waiting;
--   a fire started under the run id of the fire waiting (a forced manual fire) drops it.
-- Publishes on `wake` when the rule's next fire becomes earlier (or appears: a resume) or it
--   gains a catch-up backlog, and when a fire is the new head of `delayed`.
-- Bound: 1000 fires and 1000 records per call.
-- Counts in `stats`: fired, fire_duplicate, overlap_skip, ledger:<outcome>:<reason>:<schedule_id>
--   (a range record: its number of slots).
-- BEGIN btree: the delayed set, key layout 3. Source: lua/lib/btree.lua; `make lua` copies the
--   functions a script calls into it, and a test keeps the copies equal. Edit it there.
-- A B-tree of small ZSETs, so a waiting run costs ~40 bytes of index instead of the ~130 of
-- one skiplist ZSET (docs/architecture.md, "The delayed set"). `d` is the delayed key name:
--   d:index     ZSET, every score 0: a member per leaf, its bound then its number, so lex
--               order is (due, run id) order
--   d:leaf:<n>  ZSET run_id -> due_ms, at most BT_MAX runs (a listpack at default settings)
--   d           HASH seq (last leaf number), n (runs in the tree); a ZSET here is the
--               delayed set of key layout 2, which `zsched migrate` moves into the tree
-- A run's key: its due in 15 digits, its id with \0 escaped as \0\1, then \0\0: byte order of
-- keys is (due, id) order and no key is a prefix of another. The value of a delayed run in
-- `runs` starts with its due (bt_tag), so cancel finds its leaf from the run id alone.
-- Invariant: a leaf holds only runs with keys >= its bound and < the next leaf's bound; no
--   leaf is empty; d's n counts the runs in the leaves.
-- Strings are never compared with Lua's `<`: it follows the server's locale (strcoll).
-- Numbers in a redis.call are formatted by Redis with %.17g (~2.7 k instructions each): hot
-- paths pass strings.
local BT_MAX = 64
local function bt_key(due, id)
  -- A plain find first: gsub's pattern matcher costs ~200 instructions per byte of the id.
  if string.find(id, '\0', 1, true) then id = (string.gsub(id, '%z', '\0\1')) end
  return string.format('%015d', due) .. id .. '\0\0'
end
local function bt_num(m) return string.sub(m, (string.find(m, '\0\0', 16, true)) + 2) end
local function bt_bound(m) return string.sub(m, 1, (string.find(m, '\0\0', 16, true)) + 1) end
-- Lua's `<` on strings is strcoll: byte order in the C locales only (C, POSIX, C.UTF-8, whose
-- order is code point order), while Redis takes LC_COLLATE from its environment. Probed once
-- per call (ISO 14651 locales such as en_US fold case, skip punctuation, sort e-acute before
-- f); where it is not byte order, bt_less compares byte by byte. Probed on first use: most
-- calls compare no strings.
local BT_NATIVE
-- Byte order, as Redis orders ZSET members.
local function bt_less(x, y)
  if BT_NATIVE == nil then
    BT_NATIVE = ('B' < 'a') and ('Z' < '_') and ('_' < 'a') and ('-' < '0') and ('9' < 'A')
      and ('a-c' < 'ab') and ('a_c' < 'ab') and ('aB' < 'ab') and not ('ab' < 'aB')
      and ('f' < '\195\169') and ('a\0b' < 'a\0c') and ('a' < 'a\0')
  end
  if BT_NATIVE then return x < y end
  if x == y then return false end
  local n = math.min(#x, #y)
  local i = 1
  while i + 7 <= n do
    local a1, a2, a3, a4, a5, a6, a7, a8 = string.byte(x, i, i + 7)
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(y, i, i + 7)
    if a1 ~= b1 then return a1 < b1 end
    if a2 ~= b2 then return a2 < b2 end
    if a3 ~= b3 then return a3 < b3 end
    if a4 ~= b4 then return a4 < b4 end
    if a5 ~= b5 then return a5 < b5 end
    if a6 ~= b6 then return a6 < b6 end
    if a7 ~= b7 then return a7 < b7 end
    if a8 ~= b8 then return a8 < b8 end
    i = i + 8
  end
  while i <= n do
    local a, b = string.byte(x, i), string.byte(y, i)
    if a ~= b then return a < b end
    i = i + 1
  end
  return #x < #y
end
-- The value kept in `runs` for a run due at `due`: \0, 6 bytes of due ms (big-endian), envelope.
-- (enqueue.lua inlines it in its batch loop: a change here goes there too.)
-- (Arithmetic of the VM, not math.floor: each C function call costs about as much as the rest.)
local function bt_tag(due, env)
  local b6 = due % 256
  local r = (due - b6) / 256
  local b5 = r % 256
  r = (r - b5) / 256
  local b4 = r % 256
  r = (r - b4) / 256
  local b3 = r % 256
  r = (r - b3) / 256
  local b2 = r % 256
  return string.char(0, (r - b2) / 256, b2, b3, b4, b5, b6) .. env
end
-- (due, id) order of two runs without building their keys: ids in byte order on a tie.
local function bt_before(due1, id1, due2, id2)
  if due1 ~= due2 then return due1 < due2 end
  return bt_less(id1, id2)
end
-- Add runs: ids[j] due at dues[j] (j = 1..n; n defaults to #ids), ids not in the tree;
-- texts[j], when given and not false, is dues[j] as decimal text, sent to ZADD as it is.
-- Parallel arrays, not a table per run: a small table costs ~1 k instructions to make and
-- collect. Sorted first (skipped when already in order; else sorted copies of the arrays), so
-- the runs bound for one leaf cost one lookup and one ZADD; the next leaf's bound is read only
-- when a second run may go to the same leaf (one run: 4 commands).
-- want_head: also return whether the earliest run now sorts before every run that was in the
-- tree (one more read, and only when it lands in the first leaf).
local function bt_add(d, ids, dues, want_head, texts, n_items)
  local index, meta = d .. ':index', d
  n_items = n_items or #ids -- #t is a search: counted once
  texts = texts or dues
  local sorted, prev_due = true, dues[1]
  for i = 2, n_items do
    -- (bt_before inlined: a Lua call per run costs as much as the comparison)
    local due = dues[i]
    if due <= prev_due and (due < prev_due or bt_less(ids[i], ids[i - 1])) then
      sorted = false
      break
    end
    prev_due = due
  end
  if not sorted then
    local order = {}
    for i = 1, n_items do order[i] = i end
    table.sort(order, function(x, y) return bt_before(dues[x], ids[x], dues[y], ids[y]) end)
    local s_ids, s_dues, s_texts = {}, {}, {}
    for i = 1, n_items do
      local j = order[i]
      s_ids[i], s_dues[i], s_texts[i] = ids[j], dues[j], texts[j]
    end
    ids, dues, texts = s_ids, s_dues, s_texts
  end
  local head, counted = nil, nil -- head: known after the first pass
  local args = {} -- a leaf's ZADD arguments, reused by every pass
  local i = 1
  while i <= n_items do
    local k = bt_key(dues[i], ids[i])
    -- The leaf whose range holds k, and the one before it (none: it is the first leaf).
    local found = redis.call('ZRANGE', index, '[' .. k .. '\255', '-', 'BYLEX', 'REV', 'LIMIT', '0', '2')
    local m = found[1]
    -- The first write on d comes after the first read of the index, before any other write: a
    -- caller may run bt_add under pcall to learn a wrong type of either before anything changed.
    if not counted then counted = redis.call('HINCRBY', meta, 'n', n_items == 1 and '1' or n_items) end
    if not m then
      -- Before every bound: the first leaf takes it and its bound moves down to it.
      if head == nil then head = true end
      m = redis.call('ZRANGE', index, '0', '0')[1]
      if m then
        redis.call('ZREM', index, m)
        m = k .. bt_num(m)
      else
        m = k .. redis.call('HINCRBY', meta, 'seq', '1')
      end
      redis.call('ZADD', index, '0', m)
    end
    local leaf = d .. ':leaf:' .. bt_num(m)
    if head == nil then
      head = false
      if want_head and not found[2] then
        local low = redis.call('ZRANGE', leaf, '0', '0', 'WITHSCORES')
        head = bt_before(dues[1], ids[1], tonumber(low[2]), low[1])
      end
    end
    local first, upto, upto_due, looked = i, nil, nil, false
    -- Whether run j belongs to this leaf: the first run of the pass does (m is its floor).
    local function belongs(j)
      if j == first then return true end
      if not looked then
        local nxt = redis.call('ZRANGE', index, '(' .. m, '+', 'BYLEX', 'LIMIT', '0', '1')[1]
        upto, looked = nxt and bt_bound(nxt), true
        upto_due = upto and tonumber(string.sub(upto, 1, 15))
      end
      if not upto then return true end
      local due = dues[j]
      if due ~= upto_due then return due < upto_due end
      return bt_less(bt_key(due, ids[j]), upto)
    end
    local card = redis.call('ZCARD', leaf)
    if card < BT_MAX then
      i = i + 1
      card = card + 1
      if i <= n_items and card < BT_MAX and belongs(i) then
        -- The leaf's later runs, belongs() inlined: once the next bound is read, the runs
        -- below it are compared by due, their keys only on a tie.
        i, card = i + 1, card + 1
        if upto then
          while i <= n_items and card < BT_MAX do
            local due = dues[i]
            if due > upto_due or (due == upto_due and not bt_less(bt_key(due, ids[i]), upto)) then break end
            i, card = i + 1, card + 1
          end
        else
          -- The last leaf takes the runs up to its room, compared with nothing.
          local take = n_items - i + 1
          if take > BT_MAX - card then take = BT_MAX - card end
          i, card = i + take, card + take
        end
      end
      -- Members last first: a listpack leaf places each new member by walking from its head,
      -- so runs added in descending order land where the walk starts (the walk of a fresh
      -- leaf filled in ascending order was ~half of the ZADD's instructions).
      local a = 0
      for j = i - 1, first, -1 do
        -- The caller's text when it has it; a number goes to Redis as %.17g, exact below 10^17.
        args[a + 1], args[a + 2] = texts[j] or dues[j], ids[j]
        a = a + 2
      end
      redis.call('ZADD', leaf, unpack(args, 1, a))
    end
    if card >= BT_MAX and i <= n_items and belongs(i) then
      -- The next run belongs to this full leaf: split it; the next pass looks the run up again.
      local n = redis.call('HINCRBY', meta, 'seq', 1)
      local last = redis.call('ZRANGE', leaf, -1, -1, 'WITHSCORES')
      if bt_before(tonumber(last[2]), last[1], dues[i], ids[i]) then
        -- After all its runs: a new leaf starts here.
        redis.call('ZADD', index, 0, bt_key(dues[i], ids[i]) .. n)
      else
        local upper = redis.call('ZRANGE', leaf, BT_MAX / 2, -1, 'WITHSCORES')
        local moved, a = {}, 0
        for j = #upper - 1, 1, -2 do -- last first, as above
          moved[a + 1], moved[a + 2] = upper[j + 1], upper[j]
          a = a + 2
        end
        redis.call('ZADD', d .. ':leaf:' .. n, unpack(moved))
        redis.call('ZREMRANGEBYRANK', leaf, BT_MAX / 2, -1)
        redis.call('ZADD', index, 0, bt_key(tonumber(upper[2]), upper[1]) .. n)
      end
    end
  end
  return head == true
end
-- The earliest due in the tree, or nil when it is empty.
local function bt_head(d)
  local m = redis.call('ZRANGE', d .. ':index', '0', '0')[1]
  if not m then return nil end
  return tonumber(redis.call('ZRANGE', d .. ':leaf:' .. bt_num(m), '0', '0', 'WITHSCORES')[2])
end
-- Refuse a delayed set of key layout 2 or keys of the wrong type (d, and the index unless a
-- caller reads it with pcall first); nil when all is well.
local function bt_check(d, script, index_too)
  local want_of = {[d] = 'hash'}
  if index_too then want_of[d .. ':index'] = 'zset' end
  for key, want in pairs(want_of) do
    local got = redis.call('TYPE', key)['ok']
    if got ~= 'none' and got ~= want then
      if key == d and got == 'zset' then
        return redis.error_reply('WRONGTYPE zsched ' .. script .. ': key ' .. d .. ' holds a delayed set of key layout 2; run `zsched migrate` (docs/operations.md)')
      end
      return redis.error_reply('WRONGTYPE zsched ' .. script .. ': key ' .. key .. ' is a ' .. got .. ', expected a ' .. want)
    end
  end
end
-- END btree
local rules, rule_next, rule_state, catchup, runs, delayed, done, stats, wake, waiting, ledger, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
-- Check types before any write: a script is atomic but not transactional.
for key, want in pairs({[rules] = 'hash', [rule_next] = 'zset', [rule_state] = 'hash', [catchup] = 'zset', [runs] = 'hash', [done] = 'zset', [stats] = 'hash', [waiting] = 'hash', [ledger] = 'stream', [lease] = 'string'}) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched fire: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local err = bt_check(delayed, 'fire', true)
if err then return err end
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
if n_fires > 1000 or first_rec - 1 > #ARGV or (#ARGV - first_rec + 1) % 5 ~= 0 or (#ARGV - first_rec + 1) > 5000 then
  return redis.error_reply('ERR zsched fire: expected n_fires groups of 5 then groups of 5 (at most 1000 each)')
end

-- Compare-and-set: the rule, its next fire and its state are still what the caller read.
local cur_next = redis.call('ZSCORE', rule_next, sid)
local exp_next = tonumber(ARGV[4])
if (redis.call('HGET', rules, sid) or '') ~= ARGV[3]
  or (cur_next and tonumber(cur_next) or nil) ~= exp_next
  or (redis.call('HGET', rule_state, sid) or '') ~= ARGV[5] then
  return {0, 0, 0, 0, 0}
end

-- Outcome counts of the rule, kept in `stats` as ledger:<outcome>:<reason>:<schedule_id>; the
-- reason only for skipped slots and only its first word (grace_passed, overlap ...), so the
-- collector's labels stay bounded.
local counted = {}
local function record(slot, outcome, reason, run_id, last)
  local n = 1
  if last and last ~= slot then
    -- A range has no run id: the caller's element there is its number of slots.
    n = string.match(run_id, '^%d+$') and tonumber(run_id)
    if n and n >= 1 then
      redis.call('XADD', ledger, 'MAXLEN', '~', maxlen, '*', 'slot_ms', slot, 'outcome', outcome,
        'reason', reason, 'run_id', '', 'at_ms', now_ms, 'last_ms', last, 'slots', n)
    else
      n = 1
      redis.call('XADD', ledger, 'MAXLEN', '~', maxlen, '*', 'slot_ms', slot, 'outcome', outcome,
        'reason', reason, 'run_id', run_id, 'at_ms', now_ms, 'last_ms', last)
    end
  else
    redis.call('XADD', ledger, 'MAXLEN', '~', maxlen, '*', 'slot_ms', slot, 'outcome', outcome,
      'reason', reason, 'run_id', run_id, 'at_ms', now_ms)
  end
  local why = outcome == 'skipped' and (string.match(reason, '^[%w_]+') or '') or ''
  local f = 'ledger:' .. outcome .. ':' .. why .. ':' .. sid
  counted[f] = (counted[f] or 0) + n
end

local function live_or_done(run_id)
  if redis.call('HEXISTS', runs, run_id) == 1 then return true end
  local d = redis.call('ZSCORE', done, run_id)
  return d and tonumber(d) > now_ms - window_ms
end

local function start(run_id, at, env)
  redis.call('HSET', runs, run_id, bt_tag(at, env))
  bt_add(delayed, {run_id}, {at})
  -- No TTL: the lease lasts for its run's whole life (delayed, ready, running, waiting for a
  -- retry); unlease ends it, or a later fire that finds its run gone (stale).
  if overlap ~= 'allow' then redis.call('SET', lease, run_id) end
end

-- A catch-up replay starts only while no run holds the lease (the caller read it free): if
-- one does now, nothing is written and the caller reads again (one after another).
local holder0 = redis.call('GET', lease)
if overlap ~= 'allow' then
  local held = holder0 and redis.call('HEXISTS', runs, holder0) == 1
  held = held or (overlap == 'queue' and redis.call('HEXISTS', waiting, sid) == 1)
  if held then
    for i = 15, first_rec - 1, 5 do
      if ARGV[i + 4] == 'replay' then return {0, 0, 0, 0, 0} end
    end
  end
end
-- A lease whose run is no longer live (done or dead, but its worker died before unlease)
-- is stale: free it now rather than wait for its TTL.
if holder0 and redis.call('HEXISTS', runs, holder0) == 0 then redis.call('DEL', lease) end
-- The rule's waiting fire: its run id and envelope, or nil.
local function waiting_fire()
  local w = redis.call('HGET', waiting, sid)
  if not w then return nil end
  local n = tonumber(string.match(w, '^(%d+):'))
  local head = #tostring(n) + 1
  return string.sub(w, head + 1, head + n), string.sub(w, head + n + 1)
end
-- A fire left waiting by a run whose lease expired or went stale goes first.
if overlap == 'queue' and redis.call('EXISTS', lease) == 0 then
  local wid, wenv = waiting_fire()
  if wid then
    -- Live or done again under its id (enqueued by hand): that run is the slot's.
    if not live_or_done(wid) then start(wid, now_ms, wenv) end
    redis.call('HDEL', waiting, sid)
  end
end

-- Policy outcomes are for older slots than the fires: record them first.
for i = first_rec, #ARGV, 5 do
  record(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
end
local fired, dups, skipped, queued, earliest = 0, 0, 0, 0, nil
local waiting_id -- the waiting fire's run id (false: none), read at the first start
for i = 15, first_rec - 1, 5 do
  local run_id, at, slot, env, outcome = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if outcome == 'replay' then outcome = 'ran_late' end
  local holder = redis.call('GET', lease)
  if live_or_done(run_id) then
    record(slot, 'duplicate', 'run id already live or done', run_id)
    dups = dups + 1
  elseif overlap ~= 'allow' and holder then
    if overlap == 'queue' and redis.call('HEXISTS', waiting, sid) == 0 then
      redis.call('HSET', waiting, sid, #run_id .. ':' .. run_id .. env)
      waiting_id = run_id
      record(slot, outcome, 'queued behind ' .. holder, run_id)
      queued = queued + 1
    else
      record(slot, 'skipped', 'overlap: ' .. holder .. ' still running', run_id)
      skipped = skipped + 1
    end
  else
    start(run_id, at, env)
    -- A fire waiting under this run id (a forced manual fire of the instant a queued one
    -- waits for) is this run now: dropped, so it never runs after this one, however this
    -- one ends (it ran again when this one went dead before the holder's unlease, not
    -- after: the outcome hung on the order of two writes; found by make model).
    if waiting_id == nil then waiting_id = waiting_fire() or false end
    if waiting_id == run_id then
      redis.call('HDEL', waiting, sid)
      waiting_id = false
    end
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
-- A next fire earlier than before (a resumed rule had none) or a new catch-up backlog: a
-- dispatcher sleeping until its own next due time must hear of it now.
local was_catchup = redis.call('ZSCORE', catchup, sid)
local sooner = (new_next >= 0 and (not cur_next or new_next < tonumber(cur_next)))
  or (catchup_head >= 0 and not was_catchup)
if new_next >= 0 then redis.call('ZADD', rule_next, new_next, sid) else redis.call('ZREM', rule_next, sid) end
if catchup_head >= 0 then redis.call('ZADD', catchup, catchup_head, sid) else redis.call('ZREM', catchup, sid) end
if sooner then redis.call('PUBLISH', wake, new_next >= 0 and new_next or now_ms) end
if fired > 0 then redis.call('HINCRBY', stats, 'fired', fired) end
if dups > 0 then redis.call('HINCRBY', stats, 'fire_duplicate', dups) end
if skipped > 0 then redis.call('HINCRBY', stats, 'overlap_skip', skipped) end
for f, n in pairs(counted) do redis.call('HINCRBY', stats, f, n) end
if earliest then
  if bt_head(delayed) == earliest then redis.call('PUBLISH', wake, earliest) end
end
return {1, fired, dups, skipped, queued}
