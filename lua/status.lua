-- status: counts of the delayed set for status and metrics; reads only.
-- KEYS[1] delayed (the B-tree's root, key layout 3: see the btree block)
-- ARGV[1] now_ms  "" = server TIME      ARGV[2] max_leaves: most leaves read to count due runs
-- Returns {sec, usec, size, due, head_ms or false, exact}: the instant used (server TIME
--   form), runs in the set, runs due at that instant, the earliest due, and exact = 1 when
--   `due` was counted (0: estimated from the share of due leaves, when more than max_leaves
--   leaves on each side of `now` would have to be read).
-- Invariant: writes nothing. Bound: max_leaves + a few commands.
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
-- The earliest due in the tree, or nil when it is empty.
local function bt_head(d)
  local m = redis.call('ZRANGE', d .. ':index', '0', '0')[1]
  if not m then return nil end
  return tonumber(redis.call('ZRANGE', d .. ':leaf:' .. bt_num(m), '0', '0', 'WITHSCORES')[2])
end
-- Runs in the tree.
local function bt_size(d) return tonumber(redis.call('HGET', d, 'n') or '0') end
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
local d = KEYS[1]
local err = bt_check(d, 'status', true)
if err then return err end
local now_ms, sec, usec
if ARGV[1] ~= '' then
  now_ms = tonumber(ARGV[1])
  sec = string.format('%.0f', math.floor(now_ms / 1000))
  usec = string.format('%.0f', (now_ms % 1000) * 1000)
else
  local t = redis.call('TIME')
  sec, usec = t[1], t[2]
  now_ms = tonumber(sec) * 1000 + math.floor(tonumber(usec) / 1000)
end
local max_leaves = tonumber(ARGV[2]) or 1000
local size, head = bt_size(d), bt_head(d)
local due, exact = 0, 1
if head and head <= now_ms then
  local index = d .. ':index'
  local later = string.format('%015d', now_ms + 1)
  local total = redis.call('ZCARD', index)
  -- Leaves whose bound is due. All but the last are due as a whole: a leaf's runs sort before
  -- the next leaf's bound.
  local early = redis.call('ZLEXCOUNT', index, '-', '(' .. later)
  local last = redis.call('ZRANGE', index, '(' .. later, '-', 'BYLEX', 'REV', 'LIMIT', 0, 1)[1]
  local last_leaf = d .. ':leaf:' .. bt_num(last)
  local last_due = redis.call('ZCOUNT', last_leaf, '-inf', string.format('%d', now_ms))
  if early <= max_leaves then
    due = last_due
    if early > 1 then
      for _, m in ipairs(redis.call('ZRANGE', index, '-', '(' .. later, 'BYLEX', 'LIMIT', 0, early - 1)) do
        due = due + redis.call('ZCARD', d .. ':leaf:' .. bt_num(m))
      end
    end
  elseif total - early < max_leaves then
    local not_due = redis.call('ZCARD', last_leaf) - last_due
    for _, m in ipairs(redis.call('ZRANGE', index, '[' .. later, '+', 'BYLEX')) do
      not_due = not_due + redis.call('ZCARD', d .. ':leaf:' .. bt_num(m))
    end
    due = size - not_due
  else
    due, exact = math.floor(size * (early - 1) / total) + last_due, 0
  end
end
return {sec, usec, size, due, head or false, exact}
