"""Reads and dead-letter operations across the partitions of a partitioned queue: each
partition's status and their total, dead letters of every partition, replay and purge routed
to the partition that holds each entry (docs/scaling.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from zsched.runs import status as _status
from zsched.runs.status import DeadLetter, QueueStatus

if TYPE_CHECKING:
    from zsched.context import QueueContext


def statuses(ctx: QueueContext) -> list[QueueStatus]:
    """The status of each partition; `queue` reads `<queue>#<i>`."""
    return [
        replace(
            _status.queue_status(v.redis, v.scripts, v.keys), queue=f"{ctx.queue}#{v.partition}"
        )
        for v in ctx.views()
    ]


def total(queue: str, parts: list[QueueStatus]) -> QueueStatus:
    """Sum of the partitions' counts; ages are the oldest over all partitions."""
    paused = [p for p in parts if p.paused]
    values: dict[str, Any] = {
        "queue": queue, "stats": {}, "paused": bool(paused),
        "paused_ms": min((p.paused_ms for p in paused if p.paused_ms is not None), default=None),
        "pause_note": next((p.pause_note for p in paused if p.pause_note), None),
    }  # fmt: skip
    for f in fields(QueueStatus):
        if f.name in values:
            continue
        combine: Callable[[Iterable[int]], int] = max if f.name.endswith(("_ms",)) else sum
        values[f.name] = combine(getattr(p, f.name) for p in parts)
    for p in parts:
        for name, n in p.stats.items():
            values["stats"][name] = values["stats"].get(name, 0) + n
    return QueueStatus(**values)


def dead_letters(ctx: QueueContext, count: int, start: str) -> list[DeadLetter]:
    """Dead letters of every partition, oldest first (by the time they died), at most `count`.

    Stream entry ids are only unique within one partition, so each id is qualified with its
    partition, `<partition>:<entry id>`; replay_dead and purge_dead accept both forms.
    """
    out = [replace(d, entry_id=f"{v.partition}:{d.entry_id}")
           for v in ctx.views()
           for d in _status.dead_letters(v.redis, v.keys, count, start)]  # fmt: skip
    out.sort(key=lambda d: (d.dead_at is None, d.dead_at, d.entry_id))
    return out[:count]


def _ids_by_partition(n: int, entry_ids: Iterable[str]) -> dict[int, list[str]]:
    """Qualified ids go to their partition; a bare stream id is looked for in every one."""
    out: dict[int, list[str]] = {i: [] for i in range(n)}
    for eid in entry_ids:
        head, sep, tail = eid.partition(":")
        if sep and head.isdigit() and int(head) in out:
            out[int(head)].append(tail)
        else:
            for ids in out.values():
                ids.append(eid)
    return out


def replay_dead(ctx: QueueContext, entry_ids: Iterable[str] | None) -> dict[str, int]:
    """Replay in every partition; an entry id counts as missing only if no partition had it."""
    ids = None if entry_ids is None else list(entry_ids)
    routed = None if ids is None else _ids_by_partition(ctx.partitions, ids)
    counts = {"replayed": 0, "missing": 0, "live": 0, "undecodable": 0}
    for v in ctx.views():
        assert v.partition is not None
        mine = None if routed is None else routed[v.partition]
        if mine == []:
            continue
        for name, n in _status.replay_dead(v, mine).items():
            if name != "missing":
                counts[name] += n
    if ids is not None:
        counts["missing"] = len(ids) - counts["replayed"] - counts["live"] - counts["undecodable"]
    return counts


def purge_dead(ctx: QueueContext, entry_ids: Iterable[str] | None) -> int:
    views = ctx.views()
    if entry_ids is None:
        return sum(_status.purge_dead(v.redis, v.keys, None) for v in views)
    routed = _ids_by_partition(ctx.partitions, entry_ids)
    return sum(
        _status.purge_dead(v.redis, v.keys, routed[i]) for i, v in enumerate(views) if routed[i]
    )
