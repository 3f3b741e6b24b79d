"""Even placement of a partitioned queue's partitions over a cluster's masters.

A partition lives in the slot of its tag `{q#i}`, and which master owns that slot is an
accident of the slot ranges: 12 partitions on 3 masters split 3 / 4 / 5 (or worse), so the
busiest master carries ~42 % of the work and caps the gain of 3 masters at ~2.4x. This module
keeps every key name as it is and moves *slots* instead: it reads the owners (CLUSTER SLOTS),
plans the fewest slot moves that leave each master with floor(N/M) or ceil(N/M) partitions,
and (with apply) moves each slot the way `redis-cli --cluster reshard` does (SETSLOT
IMPORTING / MIGRATING, MIGRATE of the slot's keys, SETSLOT NODE), live.

`python -m zsched.store.placement --redis redis+cluster://h:p,... --queue q [--apply]`;
docs/scaling.md says how an operator checks the split and rebalances.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis
from redis.crc import key_slot

from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import text
from zsched.store.urls import parse

#: Keys moved per MIGRATE call while a slot moves.
MIGRATE_BATCH = 100


@dataclass(frozen=True)
class Master:
    """A master of the cluster: its node id and address."""

    node_id: str
    host: str
    port: int

    @property
    def addr(self) -> str:
        """host:port."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Move:
    """Move `slot` (holding `partitions`) from master `src` to `dst`."""

    slot: int
    partitions: tuple[int, ...]
    src: Master
    dst: Master


def partition_slots(queue: str, n: int) -> list[int]:
    """The cluster slot of each partition 0..n-1 of `queue` (the slot of its hash tag)."""
    return [key_slot(QueueKeys(queue, i).runs.encode()) for i in range(n)]


def slot_owners(r: Any) -> tuple[dict[int, Master], list[Master]]:
    """(slot -> owning master, every master) from CLUSTER SLOTS of any node."""
    owners: dict[int, Master] = {}
    masters: dict[str, Master] = {}
    for start, end, primary, *_replicas in r.execute_command("CLUSTER", "SLOTS"):
        host, port, node_id = text(primary[0]), int(primary[1]), text(primary[2])
        m = masters.setdefault(node_id, Master(node_id, host or "127.0.0.1", port))
        for slot in range(int(start), int(end) + 1):
            owners[slot] = m
    return owners, sorted(masters.values(), key=lambda m: (m.host, m.port))


def placement(queue: str, n: int, owners: dict[int, Master]) -> dict[Master, list[int]]:
    """Master -> the partitions it holds now."""
    out: dict[Master, list[int]] = {}
    for i, slot in enumerate(partition_slots(queue, n)):
        out.setdefault(owners[slot], []).append(i)
    return out


def plan(queue: str, n: int, owners: dict[int, Master], masters: list[Master]) -> list[Move]:
    """The fewest slot moves that leave each master with floor(n/M) or ceil(n/M) partitions.

    Greedy: while the fullest master holds more than the emptiest plus one, move one of its
    slots (the one with the fewest partitions, usually one) to the emptiest; partitions whose
    tags share a slot move together."""
    by_slot: dict[int, list[int]] = {}
    for i, slot in enumerate(partition_slots(queue, n)):
        by_slot.setdefault(slot, []).append(i)
    where = {slot: owners[slot] for slot in by_slot}
    moves: list[Move] = []
    for _ in range(len(by_slot)):
        load = Counter({m: 0 for m in masters})
        for slot, parts in by_slot.items():
            load[where[slot]] += len(parts)
        full = max(masters, key=lambda m: load[m])
        empty = min(masters, key=lambda m: load[m])
        mine = sorted((s for s in by_slot if where[s] == full), key=lambda s: len(by_slot[s]))
        if not mine or load[full] - load[empty] <= len(by_slot[mine[0]]):
            break
        slot = mine[0]
        moves.append(Move(slot, tuple(by_slot[slot]), full, empty))
        where[slot] = empty
    return moves


def move_slot(move: Move, masters: list[Master], **kw: Any) -> int:
    """Move one slot live, keys and all; returns the keys moved. Scripts that touch the slot
    meanwhile get TRYAGAIN/ASK, which zsched's clients retry as they do during a failover."""
    src, dst = _node(move.src, **kw), _node(move.dst, **kw)
    moved = 0
    try:
        dst.execute_command("CLUSTER", "SETSLOT", move.slot, "IMPORTING", move.src.node_id)
        src.execute_command("CLUSTER", "SETSLOT", move.slot, "MIGRATING", move.dst.node_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", move.slot, MIGRATE_BATCH):
            auth = ["AUTH", kw["password"]] if kw.get("password") else []
            src.execute_command("MIGRATE", move.dst.host, move.dst.port, "", 0, 60_000,
                                *auth, "KEYS", *keys)  # fmt: skip
            moved += len(keys)
        # The new owner first, then the old, then the rest (the order redis-cli uses).
        others = [m for m in masters if m not in (move.src, move.dst)]
        for m in (move.dst, move.src, *others):
            c = _node(m, **kw)
            try:
                c.execute_command("CLUSTER", "SETSLOT", move.slot, "NODE", move.dst.node_id)
            finally:
                c.close()
    finally:
        src.close()
        dst.close()
    return moved


def balance(url: str, queue: str, n: int, apply: bool = False) -> list[Move]:
    """Plan (and with `apply`, carry out) the even placement of `queue`'s n partitions."""
    kw = _auth(url)
    first = parse(url).nodes[0]
    r: Any = redis.Redis(host=first[0], port=first[1], **kw)
    try:
        owners, masters = slot_owners(r)
    finally:
        r.close()
    moves = plan(queue, n, owners, masters)
    if apply:
        for m in moves:
            move_slot(m, masters, **kw)
    return moves


def report(queue: str, n: int, owners: dict[int, Master], masters: list[Master]) -> str:
    """One line per master: the partitions it holds and their share."""
    now = placement(queue, n, owners)
    lines = []
    for m in masters:
        parts = now.get(m, [])
        lines.append(f"{m.addr}  {len(parts):>3} partitions ({len(parts) / n:.0%})  {parts}")
    return "\n".join(lines)


def _auth(url: str) -> dict[str, Any]:
    t = parse(url)
    return {**t.auth, **({"ssl": True} if t.ssl else {})}


def _node(m: Master, **kw: Any) -> Any:
    return redis.Redis(host=m.host, port=m.port, socket_timeout=70, **kw)


def main(argv: list[str] | None = None) -> int:
    """Print the placement of a queue's partitions, the planned moves, and apply them."""
    ap = argparse.ArgumentParser(prog="python -m zsched.store.placement", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--redis", required=True, help="redis+cluster://host:port,...")
    ap.add_argument("--queue", required=True)
    ap.add_argument("--partitions", type=int, default=None, help="default: the recorded count")
    ap.add_argument("--apply", action="store_true", help="move the slots (live)")
    a = ap.parse_args(argv)
    from zsched.store.connection import sync_client
    from zsched.store.partitions import stored_count

    n = a.partitions or stored_count(sync_client(a.redis), a.queue)
    if n < 2:
        print(f"queue {a.queue!r} is not partitioned: nothing to place", file=sys.stderr)
        return 1
    kw = _auth(a.redis)
    host, port = parse(a.redis).nodes[0]
    owners, masters = slot_owners(redis.Redis(host=host, port=port, **kw))
    print(report(a.queue, n, owners, masters))
    moves = plan(a.queue, n, owners, masters)
    for mv in moves:
        print(f"move slot {mv.slot} (partitions {list(mv.partitions)}) "
              f"{mv.src.addr} -> {mv.dst.addr}")  # fmt: skip
    if not moves:
        print("already even")
    elif a.apply:
        for mv in moves:
            keys = move_slot(mv, masters, **kw)
            print(f"moved slot {mv.slot}: {keys} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
