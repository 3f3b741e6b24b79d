"""The prototype that decided key layout 3 (BENCHMARKS.md, memory): the delayed index as a
B-tree of small ZSETs, against the one skiplist ZSET of key layout 2 (zsched 0.1). Kept to
measure the index alone; zsched runs lua/lib/btree.lua, which grew from it (a due tag for
cancel, byte-wise comparisons, counts).

    .venv/bin/python -m bench.btree [--n 10000 100000 1000000]

For each layout and each shape of queue (runs an hour ahead 1 ms apart, as the `memory`
scenario; all due at one instant, as scale_1m; due at random instants over 30 days), a fresh
redis-server gets `n` runs through an enqueue script (calls of 100, as zsched's), each run's
envelope in one `runs` HASH (outside the scripts, the same for both), then a dispatch script
empties the index (calls of 500). Printed: Redis memory per run (used_memory over a warm
baseline) and Redis's own time per run in each script (INFO commandstats), so the index's
cost is measured alone: the XADD, HMGET and bookkeeping of the real dispatch are the same in
both layouts and left out.

The B-tree: leaves are ZSETs of at most 128 runs (listpacks at Redis's default settings);
one index ZSET holds, for each leaf, a member `<due, 15 digits><run id, \0 escaped>\0\0<leaf
number>` (all scored 0, so lex order is (due, id) order) whose first part is the leaf's lower
bound. A run
goes to the leaf with the greatest bound <= (due, id), or the first leaf. A full leaf splits in
two, or, when the new run sorts after all of its runs, the run starts a new leaf (the
rightmost split that keeps leaves full when runs arrive in order). A batch is sorted first,
so the runs bound for one leaf cost one lookup and one ZADD. Prototype limits: no cancel or
retry; a leaf holding an id over 64 bytes becomes a skiplist (correct, without the saving).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Iterator
from typing import Any

from zsched.protocol.envelope import encode_first
from zsched.protocol.runids import fresh_run_id

from .common import client, now_ms, payload, server, used_memory

BTREE_ENQUEUE = r"""
-- btree_enqueue (prototype): add runs to the B-tree of listpack ZSET leaves.
-- KEYS[1] index (zset, scores 0, members: a leaf's bound (see key) and its number)
-- KEYS[2] leaf counter (string)   KEYS[3] leaf key prefix (leaves are prefix .. n)
-- ARGV groups of 2: run_id, due_ms (>= 0)
-- Returns the number of leaf splits.
-- Invariant: every leaf holds runs >= its bound and < the next leaf's bound; no leaf holds
--   more than MAX runs, so each stays a listpack.
-- The batch is sorted first, so runs bound for one leaf cost one lookup and one ZADD.
local index, counter, prefix = KEYS[1], KEYS[2], KEYS[3]
local MAX = 128
-- A run's key: the due time in 15 digits, then the id with \0 escaped as \0\1 and ended by
-- \0\0, so byte order is (due, id) order for ids of any length and no key prefixes another.
local function key(due, id)
  return string.format('%015d', due) .. (string.gsub(id, '%z', '\0\1')) .. '\0\0'
end
-- An index member is a leaf's bound (a key) followed by the leaf's number.
local function key_end(member) return (string.find(member, '\0\0', 16, true)) + 1 end
local items = {}
for i = 1, #ARGV, 2 do
  local due = tonumber(ARGV[i + 1])
  items[#items + 1] = {key(due, ARGV[i]), ARGV[i], due}
end
table.sort(items, function(x, y) return x[1] < y[1] end)
local splits, i = 0, 1
while i <= #items do
  local k = items[i][1]
  local m = redis.call('ZRANGE', index, '[' .. k .. '\255', '-', 'BYLEX', 'REV', 'LIMIT', 0, 1)[1]
  if not m then
    -- Before every bound: the first leaf takes it and its bound moves down to it.
    m = redis.call('ZRANGE', index, 0, 0)[1]
    if m then
      redis.call('ZREM', index, m)
      m = k .. string.sub(m, key_end(m) + 1)
    else
      m = k .. redis.call('INCR', counter)
    end
    redis.call('ZADD', index, 0, m)
  end
  local leaf = prefix .. string.sub(m, key_end(m) + 1)
  local nxt = redis.call('ZRANGE', index, '(' .. m, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
  local upto = nxt and string.sub(nxt, 1, key_end(nxt))
  local card = redis.call('ZCARD', leaf)
  local args = {}
  while i <= #items and card < MAX and (not upto or items[i][1] < upto) do
    args[#args + 1] = items[i][3]
    args[#args + 1] = items[i][2]
    card, i = card + 1, i + 1
  end
  if #args > 0 then redis.call('ZADD', leaf, unpack(args)) end
  if card >= MAX and i <= #items and (not upto or items[i][1] < upto) then
    -- The next run belongs to this full leaf: split it; the next pass looks the run up again.
    splits = splits + 1
    local n = redis.call('INCR', counter)
    local last = redis.call('ZRANGE', leaf, -1, -1, 'WITHSCORES')
    local k2 = items[i][1]
    if k2 > key(tonumber(last[2]), last[1]) then
      redis.call('ZADD', index, 0, k2 .. n)  -- rightmost split: a new leaf starts here
    else
      local upper = redis.call('ZRANGE', leaf, MAX / 2, -1, 'WITHSCORES')
      local moved = {}
      for j = 1, #upper, 2 do
        moved[#moved + 1] = upper[j + 1]
        moved[#moved + 1] = upper[j]
      end
      redis.call('ZADD', prefix .. n, unpack(moved))
      redis.call('ZREMRANGEBYRANK', leaf, MAX / 2, -1)
      redis.call('ZADD', index, 0, key(tonumber(upper[2]), upper[1]) .. n)
    end
  end
end
return splits
"""

BTREE_DISPATCH = r"""
-- btree_dispatch (prototype): remove up to `limit` runs due by `now` from the front leaves.
-- KEYS[1] index   KEYS[2] leaf key prefix
-- ARGV[1] now_ms   ARGV[2] limit
-- Returns the number of runs removed.
-- Invariant: a leaf that empties is deleted with its index entry.
local index, prefix = KEYS[1], KEYS[2]
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local moved = 0
while moved < limit do
  local m = redis.call('ZRANGE', index, 0, 0)[1]
  if not m then break end
  local leaf = prefix .. string.sub(m, (string.find(m, '\0\0', 16, true)) + 2)
  local due = redis.call('ZRANGEBYSCORE', leaf, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit - moved)
  local n = #due / 2
  if n == 0 then break end
  moved = moved + n
  if n == redis.call('ZCARD', leaf) then
    redis.call('DEL', leaf)
    redis.call('ZREM', index, m)
  else
    redis.call('ZREMRANGEBYRANK', leaf, 0, n - 1)
    break
  end
end
return moved
"""

ZSET_ENQUEUE = r"""
-- zset_enqueue: zsched's index, one skiplist ZSET. KEYS[1] delayed; ARGV groups: id, due.
-- Returns 0.
local args = {}
for i = 1, #ARGV, 2 do
  args[#args + 1] = ARGV[i + 1]
  args[#args + 1] = ARGV[i]
end
redis.call('ZADD', KEYS[1], unpack(args))
return 0
"""

ZSET_DISPATCH = r"""
-- zset_dispatch: zsched's dispatch of the index alone. KEYS[1] delayed; ARGV now, limit.
-- Returns the number of runs removed.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
local n = #due / 2
if n > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1) end
return n
"""

LAYOUTS = {
    "skiplist ZSET (zsched)": (ZSET_ENQUEUE, ZSET_DISPATCH, ["{q}:delayed"], ["{q}:delayed"]),
    "B-tree of listpack leaves": (
        BTREE_ENQUEUE,
        BTREE_DISPATCH,
        ["{q}:index", "{q}:leaves", "{q}:leaf:"],
        ["{q}:index", "{q}:leaf:"],
    ),
}
DAY_MS = 86_400_000


def shapes(n: int) -> dict[str, Callable[[], Iterator[int]]]:
    """Due times of `n` runs, in enqueue order."""
    t0 = now_ms() + 3_600_000
    rnd = random.Random(n)
    return {
        "1h ahead, 1 ms apart": lambda: (t0 + i for i in range(n)),
        "all due at once": lambda: (t0 for _ in range(n)),
        "random over 30 days": lambda: (t0 + rnd.randrange(30 * DAY_MS) for _ in range(n)),
    }


def _evalsha_usec(r: Any) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {"usec": 0})["usec"])


def measure(layout: str, dues: Iterator[int], n: int) -> dict[str, float]:
    enq_src, disp_src, enq_keys, disp_keys = LAYOUTS[layout]
    with server() as srv:
        r = client(srv.url)
        enq, disp = r.register_script(enq_src), r.register_script(disp_src)
        enq(keys=enq_keys, args=[fresh_run_id(), 0])  # load the scripts, warm the allocator
        disp(keys=disp_keys, args=[0, 1])
        base, usec0 = used_memory(r), _evalsha_usec(r)
        p = r.pipeline(transaction=False)
        batch: list[Any] = []
        for i, due in enumerate(dues):
            rid = fresh_run_id()
            batch += [rid, due]
            p.hset("{q}:runs", rid, encode_first("noop", payload(due, i), due, due - 3_600_000))
            if len(batch) == 200:
                enq(keys=enq_keys, args=batch, client=p)
                batch = []
                if i % 2000 == 1999:
                    p.execute()
        if batch:
            enq(keys=enq_keys, args=batch, client=p)
        p.execute()
        out = {"bytes_per_run": (used_memory(r) - base) / n}
        usec1 = _evalsha_usec(r)
        out["enqueue_us_per_run"] = (usec1 - usec0) / n
        moved = 0
        while moved < n:
            got = disp(keys=disp_keys, args=[2**52, 500])
            if not got:
                break
            moved += int(got)
        out["dispatch_us_per_run"] = (_evalsha_usec(r) - usec1) / n
        out["dispatched"] = moved
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.btree", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell, median printed")
    a = ap.parse_args(argv)
    print("| runs | shape | layout | B per run | enqueue µs/run | dispatch µs/run |")
    print("|---:|---|---|---:|---:|---:|")
    for n in a.n:
        for shape in shapes(n):
            for layout in LAYOUTS:
                rows = [measure(layout, shapes(n)[shape](), n) for _ in range(a.repeat)]
                assert all(row["dispatched"] == n for row in rows), rows
                med = {k: sorted(row[k] for row in rows)[len(rows) // 2] for k in rows[0]}
                print(
                    f"| {n:,} | {shape} | {layout} | {med['bytes_per_run']:.0f} | "
                    f"{med['enqueue_us_per_run']:.2f} | {med['dispatch_us_per_run']:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
