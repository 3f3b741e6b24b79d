"""The worker's loop (a mixin of Worker): read, write outcomes, renew leases, shut down.

`Worker.run()` starts three loops here, each restarted with backoff when Redis fails; one pass
of the same work without the loops is `Worker.tick()` (zsched/worker/worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from zsched.errors import EvictionPolicyError
from zsched.protocol.keys import GROUP
from zsched.store import scripts as S
from zsched.store.connection import RETRYABLE_ERRORS
from zsched.store.retrying import REFUSALS, PassFailures
from zsched.worker import cancel as worker_cancel
from zsched.worker import limits, recovery

log = logging.getLogger("zsched.worker.worker")


class WorkerLoop:
    """run(), its loops and shutdown; mixed into Worker (`self` is the Worker: typed Any here
    because a mixin cannot name its subclass as its self type)."""

    #: Set when the worker refused to start (zsched/store/eviction.py); run() raises it.
    refused: EvictionPolicyError | None = None

    async def run(self: Any, stop: asyncio.Event | None = None) -> None:
        """Consume until `stop` is set (or SIGTERM via the CLI), then shut down cleanly."""
        stop = stop or asyncio.Event()
        q = self.app.queue
        log.info("worker %s started", self.consumer, extra={"queue": q})
        loops = [
            asyncio.create_task(self._guard(self._read_loop, stop)),
            asyncio.create_task(self._guard(self._flush_loop, stop)),
            asyncio.create_task(self._guard(self._lease_loop, stop)),
        ]
        await stop.wait()
        await self.shutdown(loops)
        log.info("worker %s stopped", self.consumer, extra={"queue": q})
        if self.refused is not None:
            raise self.refused

    async def _guard(self: Any, loop: Any, stop: asyncio.Event) -> None:
        """Run one loop, retrying with backoff while Redis is unreachable. The worker's loops
        share one Outage (`self.outage`): an outage is one WARNING per worker, not per loop."""
        q = self.app.queue
        name = getattr(loop, "__name__", loop)
        fails = PassFailures("worker", q, log, self.metrics.redis_errors.labels(q, "worker"),
                             self.outage, f"worker loop {name} failed; restarting it in %.1fs")  # fmt: skip
        while not stop.is_set():
            started = time.monotonic()
            try:
                await loop(stop)
            except EvictionPolicyError as exc:  # refused to start: stop, and run() raises it
                self.refused = exc
                stop.set()
                return
            except Exception as exc:  # noqa: BLE001 - a loop must never die silently in a live process
                if isinstance(exc, RETRYABLE_ERRORS) and time.monotonic() - started > 10:
                    fails.backoff.reset()  # a loop that ran well for a while starts over short
                if isinstance(exc, REFUSALS) and "NOGROUP" in str(exc):
                    self._group_ready = False  # the stream or group vanished: create it again
                delay = fails.failed(exc)
            else:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def _read_loop(self: Any, stop: asyncio.Event) -> None:
        s = self.settings
        await self.eviction.check(force=not self.eviction.checked)
        await self.setup()
        next_reclaim = 0.0
        # Reclaim at most every max-block: an idle worker then sends one XREADGROUP per
        # reclaim instead of a full-length read plus a short one to reach the reclaim time.
        reclaim_every = min(s.visibility_timeout_ms / 2000, 5.0)
        if self._max_block_ms:
            reclaim_every = min(reclaim_every, self._max_block_ms / 1000)
        while not stop.is_set():
            free = self._free_slots()
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            if time.monotonic() >= next_reclaim:
                if await self._reclaimable():
                    for d in await recovery.reclaim_once(self, free):
                        self._start(d)
                next_reclaim = time.monotonic() + reclaim_every
                free = self._free_slots()
                if free <= 0:
                    continue
            block = int(min(s.block_ms, max(1.0, (next_reclaim - time.monotonic()) * 1000)))
            for d in await self._read(min(free, s.read_batch), block):
                self._start(d)
            self.metrics.heartbeat.labels(self.app.queue, "worker").set(time.time())
            self.outage.ok()
            await self.eviction.check()
            self.metrics.in_flight.labels(self.app.queue).set(len(self.running))

    def _free_slots(self: Any) -> int:
        """Slots for new runs. Reads run ahead of up to `max_unwritten_acks` acks not written
        yet (two ids each), so a read need not wait for the round trip of the last batch's
        acks; past that budget an unwritten ack holds a slot again, which keeps reading from
        outpacing the writes (else, 1M runs draining, the backlog outlived the visibility
        timeout and this worker reclaimed its own entries). Retries, dead letters and
        discards (they carry envelopes) always hold their slot."""
        acks = len(self._acks) + len(self._flushing)
        over = max(0, acks - int(self.settings.max_unwritten_acks))
        heavy = len(self._retries) + len(self._deads) + len(self._discards)
        return int(self.settings.concurrency) - len(self.running) - heavy - over

    async def _reclaimable(self: Any) -> bool:
        """Whether any pending entry is idle past the visibility timeout: one XPENDING IDLE,
        so an idle queue costs Redis one command per reclaim period, not a reclaim script
        (EVALSHA plus its checks and XAUTOCLAIM). A paged reclaim goes on while it has a cursor."""
        if self.reclaim_cursor not in ("0-0", "0"):
            return True
        idle_ms, ready = self.settings.visibility_timeout_ms, self.app.keys.ready
        rows = await self.redis.xpending_range(ready, GROUP, "-", "+", 1, idle=idle_ms)
        return bool(rows)

    async def _flush_loop(self: Any, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not (self._acks or self._retries or self._deads or self._discards):  # a failed flush
                await self._wake_flush.wait()
            self._wake_flush.clear()
            await self.flush()

    async def _lease_loop(self: Any, stop: asyncio.Event) -> None:
        every = self.settings.visibility_timeout_ms / 3000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            if not stop.is_set():
                self._observe_metrics()  # also while every slot holds a long handler
                await recovery.renew_leases(self)
                await worker_cancel.check_cancels(self)
                await limits.renew(self)

    async def shutdown(self: Any, loops: list[asyncio.Task[None]]) -> None:
        """Stop reading, let running handlers finish within the grace, hand back the rest."""
        self.stopping = True
        reader, others = loops[0], loops[1:]
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        if self._tasks:
            grace = self.settings.shutdown_grace_ms / 1000
            await asyncio.wait(list(self._tasks), timeout=grace)
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        try:
            await self.flush()
            await self._hand_back()
        except RETRYABLE_ERRORS:
            log.error("Redis unreachable at shutdown: held runs will be reclaimed by other "
                      "workers after the visibility timeout", extra={"queue": self.app.queue})  # fmt: skip
        for t in list(self._tasks):
            t.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _hand_back(self: Any) -> None:
        """Release every entry still pending for this consumer (unfinished or never started)."""
        if not self._group_ready:  # never read (e.g. refused to start): nothing is held
            return
        k = self.app.keys
        mine = await recovery.own_pending(self)
        gone = [eid for eid, run_id in mine if not run_id]
        pairs = [(eid, run_id) for eid, run_id in mine if run_id]
        if gone:
            await self.redis.xack(k.ready, GROUP, *gone)
        released = 0
        for i in range(0, len(pairs), S.MAX_BATCH):
            codes = await self.scripts.run(
                S.release(
                    k, self.consumer, pairs[i : i + S.MAX_BATCH], now_ms=self.app.clock.now_ms()
                )
            )
            released += sum(codes)
        if released:
            log.info("handed back %d runs", released, extra={"queue": self.app.queue})
        if not await recovery.own_pending(self):
            await self.redis.xgroup_delconsumer(k.ready, GROUP, self.consumer)
