"""Partitioned queues: where a run lives, views of one partition, the stored partition count,
and dispatchers/workers that serve every partition fairly.

A queue `q` split into N > 1 partitions is N complete queues whose keys carry the tags
`{q#0}` … `{q#N-1}`, so Redis Cluster spreads them over its masters. A run lives in the
partition of its run id (`run_partition`), a recurring rule in the partition of its schedule id
(`partition_for`); a fire's run id `<schedule_id>@<slot>` routes by the part before its last `@`,
so a rule's fires land in the rule's partition and dedupe stays exact. The count is recorded
once in Redis (keys.partitions_key) and an App with another count is refused (ConfigError):
changing N moves every run id to another partition, so it needs a drain (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from zsched.config import WorkerSettings
from zsched.errors import ConfigError
from zsched.protocol.keys import QueueKeys, partitions_key
from zsched.runs.status import DeadLetter, QueueStatus
from zsched.store.connection import async_client, async_from_sync, ensure_ready
from zsched.store.state import StoreTarget

if TYPE_CHECKING:
    from zsched.app import App

#: Largest accepted partition count; far more than masters a cluster sensibly has.
MAX_PARTITIONS = 1024


def partition_for(key: str, n: int) -> int:
    """The partition of `key` among `n`: CRC-32 (zlib, IEEE) of its UTF-8 bytes, modulo n."""
    return zlib.crc32(key.encode()) % n if n > 1 else 0


def routing_key(run_id: str) -> str:
    """The part of a run id that picks its partition: the text before its last `@`, if any.

    A fire `<schedule_id>@<slot>` then routes with its rule; other ids are hashed whole unless
    they contain `@` (still a pure function of the id, so dedupe stays exact).
    """
    head, sep, _tail = run_id.rpartition("@")
    return head if sep and head else run_id


def run_partition(run_id: str, n: int) -> int:
    """The partition that holds run `run_id` of a queue with `n` partitions."""
    return partition_for(routing_key(run_id), n)


def check_count(n: object) -> int:
    """Validate a partition count (1 = not partitioned)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be an integer 1..{MAX_PARTITIONS}, got {n!r}")
    return n


def stored_count(r: Any, queue: str) -> int:
    """The partition count recorded in Redis for `queue` (1 when none is recorded)."""
    raw = r.get(partitions_key(queue))
    return int(raw) if raw is not None else 1


def claim_layout(app: StoreTarget) -> None:
    """Record the App's partition count, or refuse one that differs from the recorded count.

    Runs once per App (views share the flag). A partitioned App also refuses a queue whose
    unpartitioned keys still hold live runs: nobody would serve them any more.
    """
    if app.shared.layout_checked:
        return
    r, key, n = app.redis, partitions_key(app.queue), app.partitions
    if n == 1:
        stored = stored_count(r, app.queue)
        if stored != 1:
            raise ConfigError(_mismatch(app.queue, stored, 1))
    else:
        old = r.set(key, n, nx=True, get=True)
        if old is None and int(r.hlen(QueueKeys(app.queue).runs)):
            r.delete(key)
            raise ConfigError(
                f"queue {app.queue!r} holds live runs in its unpartitioned keys; drain it "
                f"before splitting it into {n} partitions (docs/scaling.md)"
            )
        if old is not None and int(old) != n:
            raise ConfigError(_mismatch(app.queue, int(old), n))
    app.shared.layout_checked = True


def _mismatch(queue: str, stored: int, wanted: int) -> str:
    return (
        f"queue {queue!r} is recorded in Redis with {stored} partition(s), this App uses "
        f"{wanted}; use partitions={stored}, or drain the queue and reset the count as "
        f"docs/scaling.md describes"
    )


def reset_layout(app: StoreTarget) -> None:
    """Forget the recorded count of a drained queue, so it can be re-split (docs/scaling.md).

    Refuses while any partition (or the unpartitioned keys) still holds a live run or an
    undelivered stream entry; dead letters and completion records are not moved.
    """
    r = app.redis
    stored = stored_count(r, app.queue)
    every = [QueueKeys(app.queue)] + [QueueKeys(app.queue, i) for i in range(stored)]
    busy = [k.tag for k in every if int(r.hlen(k.runs)) or int(r.xlen(k.ready))]
    if busy:
        raise ConfigError(f"queue {app.queue!r} is not drained: live runs in {', '.join(busy)}")
    r.delete(partitions_key(app.queue))
    app.shared.layout_checked = False


# -- views --------------------------------------------------------------------------------------


def declared_in(declared: dict[str, dict[str, Any]], n: int, i: int) -> dict[str, dict[str, Any]]:
    """The declared rules that live in partition `i` of `n` (each rule in exactly one)."""
    return {s: o for s, o in declared.items() if partition_for(s, n) == i}


def shares(total: int, n: int) -> list[int]:
    """Split `total` handler slots over `n` partitions as evenly as possible, at least 1 each."""
    return [max(1, total // n + (1 if i < total % n else 0)) for i in range(n)]


def _shared_async_client(app: App, redis: Any) -> Any:
    if redis is not None:
        return redis
    return async_client(app.url) if app.url else async_from_sync(app.redis)


class MultiDispatcher:
    """One Dispatcher per partition, all in one event loop.

    Each partition has its own loop, timer and wake-up subscription, so a partition with a large
    backlog (its tick moves bounded batches and yields between them) never delays another's.
    """

    def __init__(self, app: App, redis: Any = None, **settings: Any) -> None:
        self.app = app
        self.redis = _shared_async_client(app, redis)
        self.dispatchers = [
            v.dispatcher(redis=self.redis, **settings) for v in app.partition_views()
        ]

    async def tick(self) -> list[Any]:
        """One pass over every partition; a TickResult per partition."""
        return [await d.tick() for d in self.dispatchers]

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        await asyncio.to_thread(self.app.ctx.claim_layout)
        # Load a cluster client's slot map once, before the partitions use it concurrently:
        # redis-py 8.1 races when many coroutines connect a fresh cluster client at once.
        await ensure_ready(self.redis)
        await asyncio.gather(*(d.run(stop) for d in self.dispatchers))

    async def close(self) -> None:
        # Like Dispatcher.close: the client (shared by the partitions) is closed too.
        await self.redis.aclose()


class MultiWorker:
    """One Worker per partition, all in one event loop, each with its share of `concurrency`.

    A partition's share is its own: a partition with 10,000 ready runs cannot take the slots of
    a quiet one, whose runs start as soon as they are dispatched. The price: a single busy
    partition uses only its share (`concurrency / partitions`, at least 1) of the process.
    """

    def __init__(
        self, app: App, redis: Any = None, consumer: str | None = None, **settings: Any
    ) -> None:
        self.app = app
        self.redis = _shared_async_client(app, redis)
        views = app.partition_views()
        total = int(settings.pop("concurrency", WorkerSettings.concurrency))
        self.workers = [
            v.worker(redis=self.redis, consumer=consumer, concurrency=c, **settings)
            for v, c in zip(views, shares(total, len(views)), strict=True)
        ]

    async def tick(self, count: int | None = None) -> int:
        """Read and run what is ready now in every partition; returns how many ran."""
        return sum([await w.tick(count) for w in self.workers])

    async def drain(self) -> None:
        for w in self.workers:
            await w.drain()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        await asyncio.to_thread(self.app.ctx.claim_layout)
        await ensure_ready(self.redis)  # see MultiDispatcher.run
        await asyncio.gather(*(w.run(stop) for w in self.workers))

    async def close(self) -> None:
        # Each worker owns a thread pool; the client is shared (closing it again is harmless).
        for w in self.workers:
            await w.close()


# -- inspection across partitions ---------------------------------------------------------------


def statuses(app: App) -> list[QueueStatus]:
    """The status of each partition; `queue` reads `<queue>#<i>`."""
    return [replace(v.status(), queue=f"{app.queue}#{v.partition}") for v in app.partition_views()]


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


def dead_letters(app: App, count: int, start: str) -> list[DeadLetter]:
    """Dead letters of every partition, oldest first (by the time they died), at most `count`.

    Stream entry ids are only unique within one partition, so each id is qualified with its
    partition, `<partition>:<entry id>`; replay_dead and purge_dead accept both forms.
    """
    out = [replace(d, entry_id=f"{v.partition}:{d.entry_id}")
           for v in app.partition_views() for d in v.dead_letters(count, start)]  # fmt: skip
    out.sort(key=lambda d: (d.dead_at is None, d.dead_at, d.entry_id))
    return out[:count]


def _ids_by_partition(app: App, entry_ids: Iterable[str]) -> dict[int, list[str]]:
    """Qualified ids go to their partition; a bare stream id is looked for in every one."""
    out: dict[int, list[str]] = {i: [] for i in range(app.partitions)}
    for eid in entry_ids:
        head, sep, tail = eid.partition(":")
        if sep and head.isdigit() and int(head) in out:
            out[int(head)].append(tail)
        else:
            for ids in out.values():
                ids.append(eid)
    return out


def replay_dead(app: App, entry_ids: Iterable[str] | None) -> dict[str, int]:
    """Replay in every partition; an entry id counts as missing only if no partition had it."""
    ids = None if entry_ids is None else list(entry_ids)
    routed = None if ids is None else _ids_by_partition(app, ids)
    counts = {"replayed": 0, "missing": 0, "live": 0, "undecodable": 0}
    for v in app.partition_views():
        assert v.partition is not None
        mine = None if routed is None else routed[v.partition]
        if mine == []:
            continue
        for name, n in v.replay_dead(mine).items():
            if name != "missing":
                counts[name] += n
    if ids is not None:
        counts["missing"] = len(ids) - counts["replayed"] - counts["live"] - counts["undecodable"]
    return counts


def purge_dead(app: App, entry_ids: Iterable[str] | None) -> int:
    if entry_ids is None:
        return sum(v.purge_dead(None) for v in app.partition_views())
    routed = _ids_by_partition(app, entry_ids)
    return sum(v.purge_dead(routed[i]) for i, v in enumerate(app.partition_views()) if routed[i])
