-- cancel: remove a run that is still waiting in the delayed set.
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)   KEYS[2] runs (hash)
-- ARGV[1] run_id
-- Returns 1 cancelled, 0 no such live run, 2 not cancellable (already on the ready stream).
--   While `zsched migrate` runs, a run still in the layout 2 set (`<delayed>:layout2`, a key
--   not in KEYS, under the queue's tag) is cancelled there.
-- Invariant: a run leaves `delayed` and `runs` together.
-- Bound: one run per call.
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
-- A run in a batch is {run_id, due_ms[, due_ms as decimal text]}. Numbers in a redis.call
-- are formatted by Redis with %.17g (~2.7 k instructions each): hot paths pass strings.
local BT_MAX = 64
local function bt_key(due, id)
  -- A plain find first: gsub's pattern matcher costs ~200 instructions per byte of the id.
  if string.find(id, '\0', 1, true) then id = (string.gsub(id, '%z', '\0\1')) end
  return string.format('%015d', due) .. id .. '\0\0'
end
local function bt_num(m) return string.sub(m, (string.find(m, '\0\0', 16, true)) + 2) end
-- Lua's `<` on strings is strcoll: byte order in the C locales only (C, POSIX, C.UTF-8, whose
-- order is code point order), while Redis takes LC_COLLATE from its environment. Probed once
-- per call (ISO 14651 locales such as en_US fold case, skip punctuation, sort e-acute before
-- f); where it is not byte order, bt_less compares byte by byte. Probed on first use: most
-- calls compare no strings.
local BT_NATIVE
-- The due of a tagged value (nil if untagged) and the envelope without the tag.
local function bt_untag(v)
  if string.byte(v, 1) ~= 0 then return nil, v end
  local due = 0
  for i = 2, 7 do due = due * 256 + string.byte(v, i) end
  return due, string.sub(v, 8)
end
-- The leaf member whose range holds key k, or nil when k sorts before every bound.
local function bt_floor(d, k)
  return redis.call('ZRANGE', d .. ':index', '[' .. k .. '\255', '-', 'BYLEX', 'REV', 'LIMIT', '0', '1')[1]
end
-- Remove one run; 1 if it was in the tree at that due, else 0.
local function bt_remove(d, id, due)
  local m = bt_floor(d, bt_key(due, id))
  if not m then return 0 end
  local leaf = d .. ':leaf:' .. bt_num(m)
  local score = redis.call('ZSCORE', leaf, id)
  if not score or tonumber(score) ~= due then return 0 end
  redis.call('ZREM', leaf, id)
  if redis.call('EXISTS', leaf) == 0 then redis.call('ZREM', d .. ':index', m) end
  redis.call('HINCRBY', d, 'n', -1)
  return 1
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
local delayed, runs = KEYS[1], KEYS[2]
-- Check types before any write: a script is atomic but not transactional.
local err = bt_check(delayed, 'cancel', true)
if err then return err end
local got = redis.call('TYPE', runs)['ok']
if got ~= 'none' and got ~= 'hash' then return redis.error_reply('WRONGTYPE zsched cancel: key ' .. runs .. ' is a ' .. got .. ', expected a hash') end
local run_id = ARGV[1]
local v = redis.call('HGET', runs, run_id)
if not v then return 0 end
-- A delayed run's value starts with its due (its place in the tree); a run on the stream keeps
-- a stale tag, which the tree no longer matches.
local due = bt_untag(v)
if due and bt_remove(delayed, run_id, due) == 1 then
  redis.call('HDEL', runs, run_id)
  return 1
end
-- An untagged value: a run that `zsched migrate` has not moved out of the layout 2 set yet.
if not due and redis.call('ZREM', delayed .. ':layout2', run_id) == 1 then
  redis.call('HDEL', runs, run_id)
  return 1
end
return 2
