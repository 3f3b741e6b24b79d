"""Reading the delayed set of key layout 3 from Python (lua/lib/btree.lua writes it).

The scripts own every write. This module gives the due tag that prefixes a delayed run's
value in `runs` (tag/untag, kept in zsched/store/replies.py: enqueue's arguments use it too),
lists the runs of the tree (inspection, tests), puts a batch in the tree's order before it is
sent, and moves a key layout 2 set into the tree (`zsched migrate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import text
from zsched.store import scripts as S
from zsched.store.replies import tag as tag
from zsched.store.replies import untag as untag
from zsched.store.state import StoreTarget

#: A read-only script (EVAL, KEYS[1] = `delayed`) listing every run id of the delayed set,
#: earliest first, so a MULTI can read it at one instant with other keys (the chaos checks).
IDS_SCRIPT = """
local out = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1] .. ':index', 0, -1)) do
  local leaf = KEYS[1] .. ':leaf:' .. string.sub(m, (string.find(m, '\\0\\0', 16, true)) + 2)
  for _, id in ipairs(redis.call('ZRANGE', leaf, 0, -1)) do out[#out + 1] = id end
end
return out
"""


def leaf_number(member: bytes) -> str:
    """The leaf number at the end of an index member (after its bound, which ends in \\0\\0)."""
    return member[member.index(b"\0\0", 15) + 2 :].decode()


def runs(r: Any, k: QueueKeys) -> list[tuple[str, int]]:
    """(run_id, due_ms) of the runs in the delayed set, earliest first."""
    out: list[tuple[str, int]] = []
    for m in r.zrange(k.delayed_index, 0, -1):
        for rid, due in r.zrange(k.delayed_leaf(leaf_number(m)), 0, -1, withscores=True):
            out.append((text(rid), int(due)))
    return out


def due_order(groups: list[tuple[str, int | str, str, bytes]]) -> list[int]:
    """Positions of enqueue groups (run_id, run_at, task, envelope) in (due, run id) order,
    the tree's order, so each call adds its runs to a few neighbouring leaves and the script
    need not sort them (a Lua sort of 1,000 runs cost ~7 us a run, Python's ~0.5). Unchanged
    when a run's due is relative (`+N`, resolved by the server) or a run id comes twice (the
    first one must win)."""
    n = len(groups)
    if any(not isinstance(g[1], int) for g in groups) or len({g[0] for g in groups}) != n:
        return list(range(n))
    # str order is code point order, which is byte order of the UTF-8 that Redis compares.
    return sorted(range(n), key=lambda i: (groups[i][1], groups[i][0]))


def migrate(
    views: Iterable[StoreTarget], progress: Callable[[int, int], None] | None = None
) -> int:
    """Run migrate.lua on each queue (partition) until its key layout 2 set is empty; the runs
    moved. `progress(moved, left)` after each batch."""
    total = 0
    for view in views:
        left = 1
        while left:
            moved, left = view.scripts.run(S.migrate(view.keys))
            total += moved
            if progress:
                progress(total, left)
    return total
