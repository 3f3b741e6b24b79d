"""MultiWorker: one Worker per partition of a partitioned queue, in one event loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from zsched.config import WorkerSettings
from zsched.store.connection import ensure_ready
from zsched.store.partitions import shares
from zsched.worker.worker import Worker

if TYPE_CHECKING:
    from zsched.context import QueueContext


class MultiWorker:
    """One Worker per partition, all in one event loop, each with its share of `concurrency`.

    A partition's share is its own: a partition with 10,000 ready runs cannot take the slots of
    a quiet one, whose runs start as soon as they are dispatched. The price: a single busy
    partition uses only its share (`concurrency / partitions`, at least 1) of the process.
    """

    def __init__(
        self, ctx: QueueContext, redis: Any = None, consumer: str | None = None, **settings: Any
    ) -> None:
        self.ctx = ctx
        self.redis = redis if redis is not None else ctx.async_client()
        views = ctx.views()
        total = int(settings.pop("concurrency", WorkerSettings.concurrency))
        self.workers = [
            Worker(v, redis=self.redis, consumer=consumer, concurrency=c, **settings)
            for v, c in zip(views, shares(total, len(views)), strict=True)
        ]

    async def tick(self, count: int | None = None) -> int:
        """Read and run what is ready now in every partition; returns how many ran."""
        return sum([await w.tick(count) for w in self.workers])

    async def drain(self) -> None:
        for w in self.workers:
            await w.drain()

    async def run(self, stop: asyncio.Event | None = None, exiting: bool = False) -> None:
        """Run every partition's worker (`exiting`: see Worker.run)."""
        stop = stop or asyncio.Event()
        await asyncio.to_thread(self.ctx.claim_layout)
        await ensure_ready(self.redis)  # see MultiDispatcher.run
        await asyncio.gather(*(w.run(stop, exiting) for w in self.workers))

    async def close(self) -> None:
        # Each worker owns a thread pool; the client is shared (closing it again is harmless).
        for w in self.workers:
            await w.close()
