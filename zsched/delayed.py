"""Reading the delayed set of key layout 3 from Python (lua/lib/btree.lua writes it).

The scripts own every write. This module decodes the due tag that prefixes a delayed run's
value in `runs`, lists the runs of the tree (inspection, tests), and moves a key layout 2
set into the tree (`zsched migrate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import scripts as S
from .keys import QueueKeys

TAG_BYTES = 7

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


def tag(due_ms: int, envelope: bytes) -> bytes:
    """The value of a run due at `due_ms` in `runs`: 0x00, the due in 6 bytes big-endian, the
    envelope (docs/protocol.md, "The delayed set")."""
    return b"\0" + int(due_ms).to_bytes(6, "big") + envelope


def untag(value: bytes) -> tuple[int | None, bytes]:
    """(due_ms, envelope) of a value of `runs`; due_ms is None for an untagged value (written
    before key layout 3, or by hand)."""
    if value[:1] == b"\0" and len(value) >= TAG_BYTES:
        return int.from_bytes(value[1:TAG_BYTES], "big"), value[TAG_BYTES:]
    return None, value


def _s(b: Any) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


def leaf_number(member: bytes) -> str:
    """The leaf number at the end of an index member (after its bound, which ends in \\0\\0)."""
    return member[member.index(b"\0\0", 15) + 2 :].decode()


def runs(r: Any, k: QueueKeys, limit: int | None = None) -> list[tuple[str, int]]:
    """(run_id, due_ms) of the runs in the delayed set, earliest first (up to `limit`)."""
    out: list[tuple[str, int]] = []
    for m in r.zrange(k.delayed_index, 0, -1):
        for rid, due in r.zrange(k.delayed_leaf(leaf_number(m)), 0, -1, withscores=True):
            out.append((_s(rid), int(due)))
            if limit is not None and len(out) >= limit:
                return out
    return out


def migrate(r: Any, k: QueueKeys, progress: Callable[[int, int], None] | None = None) -> int:
    """Move a key layout 2 delayed set (a ZSET at `k.delayed`) into the tree, a batch per call,
    while the queue runs. Returns the runs moved; 0 when there is nothing to move."""
    script = r.register_script(S.source("migrate"))
    total = 0
    while True:
        call = S.migrate(k)
        moved, left = call.decode(script(keys=call.keys, args=call.args))
        total += moved
        if progress:
            progress(total, left)
        if not left:
            return total
