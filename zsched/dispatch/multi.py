"""MultiDispatcher: one Dispatcher per partition of a partitioned queue, in one event loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from zsched.dispatch.dispatcher import Dispatcher
from zsched.store.connection import ensure_ready

if TYPE_CHECKING:
    from zsched.context import QueueContext


class MultiDispatcher:
    """One Dispatcher per partition, all in one event loop.

    Each partition has its own loop, timer and wake-up subscription, so a partition with a large
    backlog (its tick moves bounded batches and yields between them) never delays another's.
    """

    def __init__(self, ctx: QueueContext, redis: Any = None, **settings: Any) -> None:
        self.ctx = ctx
        self.redis = redis if redis is not None else ctx.async_client()
        self.dispatchers = [Dispatcher(v, redis=self.redis, **settings) for v in ctx.views()]

    async def tick(self) -> list[Any]:
        """One pass over every partition; a TickResult per partition."""
        return [await d.tick() for d in self.dispatchers]

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        await asyncio.to_thread(self.ctx.claim_layout)
        # Load a cluster client's slot map once, before the partitions use it concurrently:
        # redis-py 8.1 races when many coroutines connect a fresh cluster client at once.
        await ensure_ready(self.redis)
        await asyncio.gather(*(d.run(stop) for d in self.dispatchers))

    async def close(self) -> None:
        # Like Dispatcher.close: the client (shared by the partitions) is closed too.
        await self.redis.aclose()
