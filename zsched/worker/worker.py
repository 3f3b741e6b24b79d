"""The worker: a consumer in the ready stream's group that runs registered tasks.

`Worker` owns its collaborators, each with its own state: the `Runner` executes runs (async
handlers on the event loop, sync ones in a thread pool, at most `concurrency` at a time), the
`Writer` buffers their outcomes and writes them in batches, `Holds` renews and reclaims the
entries held, and three loops (zsched/worker/loops.py) drive them. The read loop reads ahead
of the free slots within a budget (`read_ahead`, `max_read_ahead_bytes`; the runs read ahead
wait in `Runner.waiting`, held) and sends its next read while the last one's runs execute.
Every write is fenced: a consumer that no longer owns an entry cannot ack, retry or renew it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from zsched.config import WorkerSettings, settings_from
from zsched.store import scripts as S
from zsched.store.connection import RETRYABLE_ERRORS
from zsched.store.eviction import EvictionWatch
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery
from zsched.worker.loops import FlushLoop, Guard, HoldLoop, ReadLoop
from zsched.worker.recovery import Holds
from zsched.worker.runner import Runner
from zsched.worker.writer import Writer

if TYPE_CHECKING:
    from zsched.context import QueueContext

log = logging.getLogger(__name__)


class Worker:
    """Consumes one queue. `run()` loops until stopped; `tick()` does one non-blocking pass."""

    def __init__(
        self, ctx: QueueContext, redis: Any = None, consumer: str | None = None, **settings: Any
    ) -> None:
        allow_eviction = bool(settings.pop("allow_eviction", False))  # zsched/store/eviction.py
        s = settings_from(WorkerSettings, settings)
        self.ctx = wctx = WorkerContext.of(ctx, s, redis, consumer)
        slot_free = asyncio.Event()
        self.writer = Writer(wctx, slot_free)
        self.runner = Runner(wctx, self.writer, slot_free)
        self.holds = Holds(wctx, self.runner, self.writer)
        self.eviction = EvictionWatch(wctx.redis, wctx.keys.ready, wctx.queue, "worker",
                                      wctx.metrics, allow_eviction)  # fmt: skip
        self.reader = ReadLoop(wctx, self.runner, self.writer, self.holds, self.eviction)
        self.guard = Guard(wctx, self.reader)
        self.stopping = False
        #: Holds runs kept at shutdown until their sync handler's thread returns (`shutdown`).
        self.keeping: asyncio.Task[None] | None = None

    # -- the parts others read ---------------------------------------------------------------

    @property
    def consumer(self) -> str:
        return self.ctx.consumer

    @property
    def settings(self) -> WorkerSettings:
        return self.ctx.settings

    @property
    def redis(self) -> Any:
        return self.ctx.redis

    @property
    def scripts(self) -> S.AsyncScripts:
        return self.ctx.scripts

    @property
    def running(self) -> dict[str, Delivery]:
        """entry_id -> the deliveries executing now."""
        return self.runner.running

    # -- one pass ----------------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the consumer group if it is missing."""
        await self.reader.setup()

    async def tick(self, count: int | None = None) -> int:
        """Read what is ready now (no blocking), run it all, write the outcomes. Returns count."""
        await self.setup()
        self.runner.check_tracing()
        batch = await self.reader.read(count or self.settings.read_batch, None)
        for d in batch:
            self.runner.start(d)
        await self.drain()
        return len(batch)

    async def drain(self) -> None:
        """Wait for every started handler, then write all outcomes."""
        await self.runner.drain()
        await self.flush()

    async def flush(self) -> None:
        """Write buffered outcomes (not while holds are renewed: see Holds.renew)."""
        self.runner.observe_metrics()
        await self.writer.flush()

    # -- the loops ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None, exiting: bool = False) -> None:
        """Consume until `stop` is set (or SIGTERM via the CLI), then shut down cleanly.
        `exiting`: the process exits once this returns (the CLI), so a sync handler's thread
        still running dies with it and its run is handed back like the others; else such a
        run stays held until its thread returns (see `shutdown`)."""
        stop = stop or asyncio.Event()
        q, guard = self.ctx.queue, self.guard
        log.info("worker %s started", self.consumer, extra={"queue": q})
        loops = [
            asyncio.create_task(guard.run(self.reader.run, stop)),
            asyncio.create_task(guard.run(FlushLoop(self.runner, self.writer).run, stop)),
            asyncio.create_task(guard.run(HoldLoop(self.ctx, self.runner, self.holds).run, stop)),
        ]
        await stop.wait()
        await self.shutdown(loops, exiting)
        log.info("worker %s stopped", self.consumer, extra={"queue": q})
        if guard.refused is not None:
            raise guard.refused

    async def shutdown(self, loops: list[asyncio.Task[None]], exiting: bool = False) -> None:
        """Stop reading, let running handlers finish within the grace, hand back the rest.
        A run is handed back only once its handler has stopped: an async one is cancelled
        first. A sync handler whose thread still runs cannot be stopped: unless the process
        exits (`exiting`), its run is not handed back, or another worker would run it again
        beside that thread; it stays held, renewed by `keeping`, until the thread returns."""
        self.stopping = True
        reader, others = loops[0], loops[1:]
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        tasks, grace_s = self.runner.tasks, self.settings.shutdown_grace_ms / 1000
        if tasks:
            await asyncio.wait(list(tasks), timeout=grace_s)
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        # Calls still queued for a thread never start now: what in_threads() finds is all.
        self.runner.executor.shutdown(wait=False, cancel_futures=True)
        threads = {d.exec_task for d in self.runner.in_threads()}
        rest = [t for t in tasks if t not in threads]
        for t in rest:
            t.cancel()
        if rest:  # a handler that ignores its cancel gets one more grace, then is kept
            await asyncio.wait(rest, timeout=grace_s)
        kept = [] if exiting else self._still_running()
        try:
            await self.flush()
            if self.reader.group_ready:  # never read (e.g. refused to start): nothing is held
                await self.holds.hand_back(frozenset(d.entry_id for d in kept))
        except RETRYABLE_ERRORS:
            log.error("Redis unreachable at shutdown: held runs will be reclaimed by other "
                      "workers after the visibility timeout", extra={"queue": self.ctx.queue})  # fmt: skip
        self.runner.waiting.clear()  # handed back (or left to reclaim): never started here
        if kept:
            self.keeping = asyncio.create_task(self._keep(kept))

    def _still_running(self) -> list[Delivery]:
        """The runs whose handler still runs (a sync one's thread, an async one that ignored
        its cancel), each named in a warning."""
        kept = [d for d in self.runner.running.values()
                if d.exec_task is not None and not d.exec_task.done()]  # fmt: skip
        for d in kept:
            log.warning("run %s: its handler still runs at shutdown; the run stays held "
                        "(renewed, not handed back) until it returns, so that it cannot run "
                        "again beside it", d.run_id,
                        extra={"queue": self.ctx.queue, "run_id": d.run_id})  # fmt: skip
        return kept

    async def _keep(self, kept: list[Delivery]) -> None:
        """Renew the holds (and limit shares) of runs whose handler outlived the shutdown until
        each returns, writing each one's outcome as it comes, then leave the group."""
        every = self.settings.visibility_timeout_ms / 3000
        hold = HoldLoop(self.ctx, self.runner, self.holds)
        pending = {d.exec_task for d in kept if d.exec_task is not None}
        while True:
            if pending:
                _done, pending = await asyncio.wait(pending, timeout=every,
                                                    return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            try:
                await self.flush()  # the outcomes of the threads that returned
                if not pending:
                    await self.holds.hand_back()
                    return
                await hold.tick()
            except RETRYABLE_ERRORS:  # left pending: reclaimed after the visibility timeout
                log.warning("Redis unreachable while holding runs whose handler outlived the "
                            "shutdown", extra={"queue": self.ctx.queue})  # fmt: skip
                if not pending:
                    return

    async def close(self) -> None:
        """Close the connections. Runs kept at shutdown (a sync handler's thread still runs,
        and keeps this process alive) are held until their handlers return: close waits."""
        if self.keeping is not None and not self.keeping.done():
            for d in self.runner.running.values():
                log.warning("run %s: close waits for its handler, still running",
                            d.run_id, extra={"queue": self.ctx.queue, "run_id": d.run_id})  # fmt: skip
            await asyncio.gather(self.keeping, return_exceptions=True)
        self.runner.observe_metrics()
        self.runner.executor.shutdown(wait=False, cancel_futures=True)
        await self.ctx.redis.aclose()
        if self.ctx.reader is not self.ctx.redis:
            await self.ctx.reader.aclose()
