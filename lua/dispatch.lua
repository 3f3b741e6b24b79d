-- dispatch: move due runs from the delayed set onto the ready stream.
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- KEYS[2] runs (hash: run_id -> due tag .. envelope; this call sets a moved run's to its entry id)
-- KEYS[3] ready (stream; fields run_id, envelope, due_ms; or, while control's `entries` is
--   'tagged', run_id and envelope holding the run's value of `runs`: due tag, envelope)
-- KEYS[4] entries (a string from zsched 0.3 on, so 0.2's scripts refuse to run; its hash of
--   0.2 moves to <entries>:legacy)   KEYS[5] stats (hash)
-- KEYS[6] control (hash: paused_ms while the queue is paused, pause.lua; entries = 'tagged'
--   while no reader of plain entries only is left: set by the 0.4 worker whose start creates
--   the group of a new queue, or by `zsched entries tagged`; never here)
-- ARGV[1] now_ms       "" = server TIME; tests pass a value
-- ARGV[2] limit        max runs moved by this call (1..1000)
-- ARGV[3] max_backlog  move nothing while XLEN ready >= this; 0 = no limit
-- Returns {moved, next_due_ms, now_ms, backlogged, busy_us, run_at_ms...}: next_due_ms is the
--   earliest run_at left in `delayed` (-1 when empty); backlogged is 1 when the backlog limit
--   stopped the move, 2 when the queue is paused (nothing moves; checked only once something
--   is due, so an idle pass costs nothing more); busy_us is how long this call ran in Redis when it moved runs (server
--   TIME at its start and end; 0 on the idle pass), so the caller can size its calls on
--   Redis's own time; then the run_at_ms of each moved run, for lag metrics.
-- Invariant: a run leaves `delayed` only in the call that adds it to `ready`; a run id in
--   `delayed` without an envelope (impossible through the scripts) is dropped and counted.
-- Bound: `limit` runs per call (one XADD each, a few commands per leaf of up to BT_MAX = 64
--   runs, one HMGET of their values and one HSET of their entry ids in `runs`), one TYPE of
--   `entries` per call that moves runs (and once per queue, after zsched 0.2, its RENAME).
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
local function bt_num(m) return string.sub(m, (string.find(m, '\0\0', 16, true)) + 2) end
-- Lua's `<` on strings is strcoll: byte order in the C locales only (C, POSIX, C.UTF-8, whose
-- order is code point order), while Redis takes LC_COLLATE from its environment. Probed once
-- per call (ISO 14651 locales such as en_US fold case, skip punctuation, sort e-acute before
-- f); where it is not byte order, bt_less compares byte by byte. Probed on first use: most
-- calls compare no strings.
local BT_NATIVE
-- Take up to `limit` runs due at or before now_ms, earliest first: {ids}, n. Their dues are
-- in their values in `runs` (bt_untag): scores read back would cost a formatted number each.
local function bt_take(d, now_ms, limit)
  local index = d .. ':index'
  local now = string.format('%d', now_ms)
  local ids, n = {}, 0
  while n < limit do
    local m = redis.call('ZRANGE', index, '0', '0')[1]
    if not m then break end
    local leaf = d .. ':leaf:' .. bt_num(m)
    local due = redis.call('ZRANGEBYSCORE', leaf, '-inf', now, 'LIMIT', '0', limit - n)
    local got = #due
    if got == 0 then break end
    for j = 1, got do ids[n + j] = due[j] end
    n = n + got
    if got == redis.call('ZCARD', leaf) then
      redis.call('DEL', leaf)
      redis.call('ZREM', index, m)
    else
      redis.call('ZREMRANGEBYRANK', leaf, '0', got - 1)
      break
    end
  end
  if n > 0 then redis.call('HINCRBY', d, 'n', -n) end
  return ids, n
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
-- What `entries` holds from zsched 0.3 on: a note for whoever reads it. 0.4's begins so (0.3's
-- with 'zsched 0.3+'): a 0.4 worker that creates the group tells from it that no 0.3
-- dispatcher moved runs here (zsched/worker/recovery.py, ensure_group).
local ENTRIES_MARK = 'zsched 0.4+: a run on the stream is known in runs by its entry id; see docs/operations.md, Upgrading from zsched 0.2'
local delayed, runs, ready, entries, stats, control = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local legacy = entries .. ':legacy' -- entries of runs dispatched by zsched 0.2 (current block)
-- Check types before any write: a script is atomic but not transactional. The index is checked
-- by its first read (pcall), the others only once there is something to move (the idle pass
-- writes nothing).
local function wrong_type(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then return redis.error_reply('WRONGTYPE zsched dispatch: key ' .. key .. ' is a ' .. got .. ', expected a ' .. want) end
end
local err
local now_ms = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local max_backlog = tonumber(ARGV[3])
local function micros(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local started_us = nil
if not now_ms then
  local t = redis.call('TIME')
  started_us = micros(t)
  now_ms = math.floor(started_us / 1000)
end
if not limit or limit < 1 or limit > 1000 or not max_backlog then
  return redis.error_reply('ERR zsched dispatch: limit must be 1..1000 and max_backlog a number')
end

local out = {0, -1, now_ms, 0, 0}
-- Nothing due (the idle case): answer from the head alone, before the backlog check, so an
-- idle dispatcher costs Redis four commands per pass (EVALSHA, TIME, ZRANGE index, ZRANGE leaf).
local first = redis.pcall('ZRANGE', delayed .. ':index', '0', '0')
if first['err'] then return wrong_type(delayed .. ':index', 'zset') or redis.error_reply(first['err']) end
local head = first[1] and tonumber(redis.call('ZRANGE', delayed .. ':leaf:' .. bt_num(first[1]), '0', '0', 'WITHSCORES')[2])
if not head or head > now_ms then
  if head then out[2] = head end
  return out
end
err = bt_check(delayed, 'dispatch')
if err then return err end
for key, want in pairs({[runs] = 'hash', [ready] = 'stream', [stats] = 'hash'}) do
  err = wrong_type(key, want)
  if err then return err end
end
if not started_us then started_us = micros(redis.call('TIME')) end

-- Paused (one command, and only when something is due): nothing moves. The same read tells the
-- shape of the entries to write.
local ctl = redis.pcall('HMGET', control, 'paused_ms', 'entries')
if ctl['err'] then return wrong_type(control, 'hash') or redis.error_reply(ctl['err']) end
local tagged = ctl[2] == 'tagged'
if ctl[1] then
  out[4] = 2
  limit = 0
elseif max_backlog > 0 then
  local room = max_backlog - redis.call('XLEN', ready)
  if room <= 0 then
    out[4] = 1
    limit = 0
  elseif room < limit then
    limit = room
  end
end

if limit > 0 then
  -- Take the due runs off the front leaves, then read their values and record their entry ids
  -- with one call each, so the per-run work inside Redis is a single XADD.
  -- zsched 0.2's scripts read and write `entries` as a hash (a run's entry id). They cannot
  -- read a run this script moves (its entry id in `runs`): 0.2's release would keep the entry
  -- id as the envelope, its ack would leave the run live. So from the first move on,
  -- `entries` holds a string, which every 0.2 script that uses it refuses (WRONGTYPE) before
  -- it writes;
  -- the entries of the runs 0.2 dispatched move to `legacy` first, where the scripts read
  -- them (current block; docs/operations.md, "Upgrading from zsched 0.2"). One TYPE a call.
  local kind = redis.call('TYPE', entries)['ok']
  if kind ~= 'string' then
    if kind == 'hash' then
      if redis.call('EXISTS', legacy) == 0 then
        redis.call('RENAME', entries, legacy)
      else
        -- Only after the string was deleted by hand and a 0.2 dispatcher wrote again.
        local lk = redis.call('TYPE', legacy)['ok']
        if lk ~= 'hash' then
          return redis.error_reply('WRONGTYPE zsched dispatch: key ' .. legacy .. ' is a ' .. lk .. ', expected a hash')
        end
        local all = redis.call('HGETALL', entries)
        for j = 1, #all, 1000 do redis.call('HSET', legacy, unpack(all, j, math.min(#all, j + 999))) end
        redis.call('DEL', entries)
      end
    elseif kind ~= 'none' then
      return redis.error_reply('WRONGTYPE zsched dispatch: key ' .. entries .. ' is a ' .. kind .. ', expected a string (or a hash of zsched 0.2)')
    end
    -- (No shape is chosen here: missing keys cannot tell a new queue from one whose data Redis
    -- lost while 0.3 workers read it. docs/operations.md, "Upgrading from zsched 0.3".)
    redis.call('SET', entries, ENTRIES_MARK)
  end
  local ids, n = bt_take(delayed, now_ms, limit)
  if n > 0 then
    local envs = redis.call('HMGET', runs, unpack(ids))
    -- Counters, not #t: the length operator is a search on every append.
    local recorded, r, o, orphans = {}, 0, #out, 0
    -- The due as text, formatted once for the runs that share it (a burst due at one instant):
    -- a Lua number in a redis.call is formatted by Redis with %.17g (~2.7 k instructions).
    local last_due, due_text = nil, nil
    for i = 1, n do
      local env = envs[i]
      -- The due tag (bt_tag), read inline: one C call for its 7 bytes. A value without one
      -- (impossible through the scripts) is sent as due now.
      local z, b1, b2, b3, b4, b5, b6 = string.byte(env or '', 1, 7)
      -- A run id in the tree whose value is missing, or is an entry id (a digit first: it is
      -- on the stream already; no envelope starts so), cannot happen through the scripts: it
      -- is dropped and counted, not sent.
      if z and (z < 48 or z > 57) then
        local due, entry = now_ms, nil
        if z == 0 and b6 then
          due = ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
          -- The second shape: the value as it is (~5.6 k fewer instructions a run than
          -- making the substring and formatting the due; BENCHMARKS.md, "Session 23").
          if tagged then entry = redis.call('XADD', ready, '*', 'run_id', ids[i], 'envelope', env)
          else env = string.sub(env, 8) end
        end
        if not entry then
          if due ~= last_due then last_due, due_text = due, string.format('%d', due) end
          entry = redis.call('XADD', ready, '*', 'run_id', ids[i], 'envelope', env, 'due_ms', due_text)
        end
        recorded[r + 1], recorded[r + 2], r = ids[i], entry, r + 2
        o = o + 1
        out[o] = due
      else
        orphans = orphans + 1
      end
    end
    -- A run on the stream is known by its entry id, written over its value in `runs` (the
    -- envelope is in the entry now): an overwrite of a field that exists allocates no new
    -- field and leaves the hash's size and encoding as they were, where the `entries` hash
    -- of zsched 0.2 took an insert here and a delete in ack.lua (~1 us a run at 1,000 a call,
    -- BENCHMARKS.md "Session 22").
    if r > 0 then redis.call('HSET', runs, unpack(recorded)) end
    if orphans > 0 then redis.call('HINCRBY', stats, 'orphan', orphans) end
    out[1] = #out - 5
    if out[1] > 0 then redis.call('HINCRBY', stats, 'dispatched', out[1]) end
  end
end
head = bt_head(delayed)
if head then out[2] = head end
out[5] = math.max(0, micros(redis.call('TIME')) - started_us)
return out
