"""The worker's three loops (read, flush, hold renewal) and the guard that restarts them.

Each loop class has `run(stop)` (the sleep and wake logic only) and `tick()` (one pass; it
returns what it did), so a test can drive one pass without the loop. `Worker.run()` starts
the three, each under `guard`, which restarts a loop with backoff when Redis fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio.connection
import redis.exceptions

from zsched.errors import EvictionPolicyError
from zsched.protocol.keys import GROUP
from zsched.store.connection import RETRYABLE_ERRORS
from zsched.store.eviction import EvictionWatch
from zsched.store.replies import entry_payload
from zsched.store.retrying import REFUSALS, PassFailures
from zsched.worker import admission
from zsched.worker import cancel as worker_cancel
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery, raw_reads, read_entries
from zsched.worker.recovery import READS, Holds, ensure_group
from zsched.worker.runner import Runner
from zsched.worker.writer import Writer

log = logging.getLogger("zsched.worker.worker")  # one logger for the whole worker
_DEFAULT_SOCKET_TIMEOUT = getattr(redis.asyncio.connection, "DEFAULT_SOCKET_TIMEOUT", None)


class ReadLoop:
    """Reads new entries (and reclaims idle ones) while handler slots are free."""

    def __init__(self, ctx: WorkerContext, runner: Runner, writer: Writer, holds: Holds,
                 eviction: EvictionWatch) -> None:  # fmt: skip
        self.ctx, self.runner, self.writer, self.holds = ctx, runner, writer, holds
        self.eviction = eviction
        #: The consumer group exists (made once; again after a NOGROUP).
        self.group_ready = False
        #: Whether setup ran once (a later one re-creates a group that vanished).
        self.started = False
        self.max_block_ms = _max_block_ms(ctx.reader)
        #: Reads come back unparsed (`from_reply`): the client is pinned to RESP2.
        self.raw = raw_reads(ctx.reader)
        # Reclaim at most every max-block: an idle worker then sends one XREADGROUP per
        # reclaim instead of a full-length read plus a short one to reach the reclaim time.
        every = min(ctx.settings.visibility_timeout_ms / 2000, 5.0)
        if self.max_block_ms:
            every = min(every, self.max_block_ms / 1000)
        self.reclaim_every = every
        #: When the next reclaim is due (time.monotonic()).
        self.next_reclaim = 0.0
        #: Mean envelope size of the last read (0: none yet), for the read-ahead budget.
        self.envelope_bytes = 0
        #: The next read, sent while the runs of the last one execute (run() only, not a
        #: tick driven alone), None when none is in flight.
        self.prefetch: asyncio.Task[list[Delivery]] | None = None
        self.prefetch_count = 0
        self.prefetching = False

    async def setup(self) -> None:
        if not self.group_ready:
            ctx = self.ctx
            await ensure_group(ctx.redis, ctx.keys, starting=not self.started)
            self.started = True
            # Before the first read makes this consumer: a reader of both entry shapes
            # (recovery.READS), which `zsched entries` tells from a 0.3 worker.
            await ctx.redis.hset(ctx.keys.readers, ctx.consumer, READS)
            self.group_ready = True

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        """Up to `count` new entries; waits up to `block_ms` for one (None: no wait)."""
        ctx = self.ctx
        if ctx.server_time.stale():  # once a minute: one TIME round trip
            await ctx.server_time.ameasure(ctx.redis)
        self.runner.observe_metrics()  # start lags of long handlers show before they finish
        if block_ms and self.max_block_ms:
            block_ms = min(block_ms, self.max_block_ms)
        try:
            return await read_entries(ctx.reader, self.raw, ctx.consumer, ctx.keys.ready, count,
                                      block_ms)  # fmt: skip
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.group_ready = False
            await self.setup()
            return []

    def free_slots(self) -> int:
        """Slots for new runs. Reads run ahead of up to `max_unwritten_acks` acks not written
        yet (two ids each), so a read need not wait for the round trip of the last batch's
        acks; past that budget an unwritten ack holds a slot again, which keeps reading from
        outpacing the writes (else, 1M runs draining, the backlog outlived the visibility
        timeout and this worker reclaimed its own entries). Retries, dead letters and
        discards (they carry envelopes) always hold their slot."""
        w, s = self.writer, self.ctx.settings
        over = max(0, len(w.acks) + len(w.flushing) - int(s.max_unwritten_acks))
        heavy = len(w.retries) + len(w.deads) + len(w.discards)
        return int(s.concurrency) - len(self.runner.running) - heavy - over

    def read_ahead(self) -> int:
        """Entries a read may take beyond the free slots: `read_ahead`, fewer when the last
        read's envelopes were large (`max_read_ahead_bytes` over their mean size). Only an
        estimate (the next envelopes may be larger): `spill` makes the budget a bound."""
        s = self.ctx.settings
        if self.envelope_bytes <= 0:
            return int(s.read_ahead)
        return min(int(s.read_ahead), int(s.max_read_ahead_bytes) // self.envelope_bytes)

    def arrived(self, batch: list[Delivery]) -> None:
        """Entries just read join the waiting ones (held from now on), within the budget."""
        if batch:
            self.envelope_bytes = sum(len(d.raw) for d in batch) // len(batch) or 1
            self.runner.waiting.extend(batch)
            self.spill()

    def spill(self) -> None:
        """Keep the envelopes waiting beyond the free slots under `max_read_ahead_bytes`: one
        that would go over keeps only its ids (still held, renewed, in order) and is read again
        when its slot comes. So the budget bounds what waits, whatever the read's estimate."""
        budget, held = int(self.ctx.settings.max_read_ahead_bytes), 0
        for d in itertools.islice(self.runner.waiting, max(0, self.free_slots()), None):
            if d.spilled:
                continue
            if held + len(d.raw) > budget:
                d.raw, d.spilled = b"", True
            else:
                held += len(d.raw)

    async def refill(self) -> None:
        """Read again (one pipelined round trip) the envelopes of the spilled entries the free
        slots take next. One gone from the stream meanwhile (trimmed, deleted) is acked and
        dropped, as a reclaim drops it."""
        waiting = self.runner.waiting
        need = [d for d in itertools.islice(waiting, max(0, self.free_slots())) if d.spilled]
        if not need:
            return
        r, k = self.ctx.redis, self.ctx.keys
        async with r.pipeline(transaction=False) as p:
            for d in need:
                p.xrange(k.ready, d.entry_id, d.entry_id)
            replies = await p.execute()
        gone = []
        for d, rows in zip(need, replies, strict=True):
            d.raw, d.spilled = (entry_payload(rows[0][1])[0], False) if rows else (b"", True)
            if not rows:
                gone.append(d)
        if gone:
            await r.xack(k.ready, GROUP, *[d.entry_id for d in gone])
            for d in gone:
                waiting.remove(d)

    def start_waiting(self) -> int:
        """Start entries read ahead, in stream order, while slots are free; how many. One a
        renewal found taken by another consumer is dropped, not run (`Writer.lost`). A spilled
        one stops it: `refill` reads its envelope first."""
        waiting, lost, started = self.runner.waiting, self.writer.lost, 0
        # A start takes at most one slot (a run that ends at once frees its own, or holds it
        # with a retry or dead letter), so the count goes down by one per start and is read
        # again only when it reaches 0: free_slots() per start was ~4 % of the worker's time
        # with millisecond I/O handlers (py-spy).
        free = self.free_slots()
        while waiting and free > 0:
            if waiting[0].spilled and not (lost and waiting[0].entry_id in lost):
                break
            d = waiting.popleft()
            if lost and d.entry_id in lost:
                lost.discard(d.entry_id)
                continue
            self.runner.start(d)
            started += 1
            free -= 1
            if not free:
                free = self.free_slots()
        return started

    async def check_waiting(self) -> None:
        """Renew the holds first when the last renewal is over half a visibility timeout old
        (this process was paused: SIGSTOP, a long GC): another worker may have reclaimed
        entries waiting here meanwhile, and those are dropped instead of run twice."""
        half_s = self.ctx.settings.visibility_timeout_ms / 2000
        if self.runner.waiting and time.monotonic() - self.holds.renewed_at > half_s:
            await self.holds.renew()

    def _prefetch(self) -> None:
        """Send the next read (no blocking) once the runs just read have started, so Redis
        answers it while they execute and their outcomes are written: as many as fit under
        concurrency + read_ahead held, none when every slot is busy. Sized after the starts,
        not before: runs that ended at once (handlers that never wait) left their slots
        free, so the read is a full `read_batch`; sized before, with the batch still
        waiting, reads alternated 100 and 28 entries at the defaults, ~1.6 reads and ack
        calls per 100 runs instead of 1 (BENCHMARKS.md, the worker's CPU per run)."""
        n = min(self.ctx.settings.read_batch,
                self.free_slots() + self.read_ahead() - len(self.runner.waiting))  # fmt: skip
        if n > 0:
            self.prefetch = t = asyncio.get_running_loop().create_task(self.read(n, None))
            t.add_done_callback(self._prefetched)
            self.prefetch_count = n

    def _prefetched(self, t: asyncio.Task[list[Delivery]]) -> None:
        """A prefetch's entries wait with the others from the moment they arrive: held, so
        renewed and handed back, and never reclaimed by this worker itself (left in the task's
        result while every slot was busy, they went idle past the visibility timeout: the
        chaos smoke's duplicates)."""
        if not t.cancelled() and t.exception() is None:
            self.arrived(t.result())

    async def _next_batch(self, count: int, wait_ms: int | None) -> tuple[list[Delivery], int]:
        """The prefetched read's entries, else (none, or it found none) a read of `count`,
        in `waiting` either way; and how many the read asked for."""
        p, self.prefetch = self.prefetch, None
        if p is not None:
            batch = await p  # _prefetched put them in waiting (a done callback runs first)
            if batch:
                return batch, self.prefetch_count
        batch = await self.read(count, wait_ms)
        self.arrived(batch)
        return batch, count

    def _drop_prefetch(self) -> None:
        """The loop ends: a prefetch still in flight is cancelled (what Redis delivered to it
        stays pending for this consumer: handed back at shutdown, else reclaimed); a finished
        one's entries already wait with the rest."""
        p, self.prefetch = self.prefetch, None
        if p is not None and not p.done():
            p.cancel()

    async def tick(self, block: bool = False) -> int:
        """One pass while slots are free: start entries read ahead; reclaim idle entries when
        a reclaim is due; then, with none waiting, read up to the free slots plus the read
        ahead and start what the slots take (`block`: wait for some until the next reclaim
        is due, at most `block_ms`). Returns how many it started."""
        ctx, s = self.ctx, self.ctx.settings
        self.runner.check_tracing()  # before any start below: reclaimed runs start first
        await self.check_waiting()
        await self.refill()
        started = self.start_waiting()
        free = self.free_slots()
        if free > 0 and time.monotonic() >= self.next_reclaim:
            if await self.holds.reclaimable():
                for d in await self.holds.reclaim(free):
                    self.runner.start(d)
                    started += 1
            self.next_reclaim = time.monotonic() + self.reclaim_every
            free = self.free_slots()
        if free <= 0 or self.runner.waiting:
            return started
        left_ms = (self.next_reclaim - time.monotonic()) * 1000
        wait_ms = int(min(s.block_ms, max(1.0, left_ms))) if block else None
        count = min(free + self.read_ahead(), s.read_batch)
        batch, asked = await self._next_batch(count, wait_ms)
        if batch:
            started += self.start_waiting()
            if self.prefetching and len(batch) >= asked:  # likely more ready: ask now
                self._prefetch()
        ctx.metrics.heartbeat.labels(ctx.queue, "worker").set(time.time())
        ctx.outage.ok()
        await self.eviction.check()
        ctx.metrics.in_flight.labels(ctx.queue).set(len(self.runner.running))
        return started

    async def give_back_stuck(self) -> None:
        """Every slot is held by a sync handler stuck past its timeout (Runner._outlast): no
        run read ahead can start here until one returns, maybe never, while this worker's
        renewals keep them from other workers: hand them all back (Holds.release_waiting).
        With no free slot the read loop reads nothing meanwhile; a prefetch in flight is
        awaited first, so that its entries go back too."""
        p, self.prefetch = self.prefetch, None
        if p is not None:
            await asyncio.gather(p, return_exceptions=True)  # _prefetched put them in waiting
        if self.runner.waiting:
            await self.holds.release_waiting(list(self.runner.waiting))

    async def run(self, stop: asyncio.Event) -> None:
        await self.eviction.check(force=not self.eviction.checked)
        await self.setup()
        self.next_reclaim = 0.0
        slot_free = self.runner.slot_free
        self.prefetching = True
        try:
            while not stop.is_set():
                if self.free_slots() <= 0:
                    if self.runner.all_stuck() and (self.runner.waiting or self.prefetch):
                        await self.give_back_stuck()
                        continue  # a slot may have freed meanwhile: look again
                    slot_free.clear()
                    await slot_free.wait()
                    continue
                await self.tick(block=True)
        finally:
            self.prefetching = False
            self._drop_prefetch()


class FlushLoop:
    """Writes buffered outcomes as soon as there are some."""

    def __init__(self, runner: Runner, writer: Writer) -> None:
        self.runner, self.writer = runner, writer

    async def tick(self) -> bool:
        """Write what is buffered now; returns whether there was anything."""
        had = self.writer.unwritten()
        self.runner.observe_metrics()
        await self.writer.flush()
        return had

    async def run(self, stop: asyncio.Event) -> None:
        wake = self.writer.wake
        while not stop.is_set():
            if not self.writer.unwritten():  # else a failed flush left some: write them now
                await wake.wait()
            wake.clear()
            await self.tick()


class HoldLoop:
    """Every visibility timeout / 3: renews the holds (and limit shares; overlap leases have no TTL) and
    hears cancel requests of the runs executing."""

    def __init__(self, ctx: WorkerContext, runner: Runner, holds: Holds) -> None:
        self.ctx, self.runner, self.holds = ctx, runner, holds

    async def tick(self) -> int:
        """One renewal pass; returns how many holds were found lost."""
        self.runner.observe_metrics()  # also while every slot holds a long handler
        lost = await self.holds.renew()
        waiting = {d.entry_id: d for d in self.runner.waiting}  # a cancel starts none of them
        await worker_cancel.check_cancels(self.ctx, {**self.runner.running, **waiting})
        await admission.renew(self.ctx, self.runner.running)
        return lost

    async def run(self, stop: asyncio.Event) -> None:
        every = self.ctx.settings.visibility_timeout_ms / 3000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            if not stop.is_set():
                await self.tick()


class Guard:
    """Runs a loop, restarting it with backoff while Redis is unreachable or refuses. The
    worker's loops share one Outage (`ctx.outage`): an outage is one WARNING per worker."""

    def __init__(self, ctx: WorkerContext, reader: ReadLoop) -> None:
        self.ctx, self.reader = ctx, reader
        #: Set when the worker refused to start (zsched/store/eviction.py); run() raises it.
        self.refused: EvictionPolicyError | None = None

    async def run(self, loop: Callable[[asyncio.Event], Awaitable[None]],
                  stop: asyncio.Event) -> None:  # fmt: skip
        q, name = self.ctx.queue, getattr(loop, "__name__", loop)
        counter = self.ctx.metrics.redis_errors.labels(q, "worker")
        fails = PassFailures("worker", q, log, counter, self.ctx.outage,
                             f"worker loop {name} failed; restarting it in %.1fs")  # fmt: skip
        while not stop.is_set():
            started = time.monotonic()
            try:
                await loop(stop)
            except EvictionPolicyError as exc:  # refused to start: stop, and run() raises it
                self.refused = exc
                stop.set()
                return
            except Exception as exc:  # noqa: BLE001 - a loop must never die silently
                if isinstance(exc, RETRYABLE_ERRORS) and time.monotonic() - started > 10:
                    fails.backoff.reset()  # a loop that ran well for a while starts over short
                if isinstance(exc, REFUSALS) and "NOGROUP" in str(exc):
                    self.reader.group_ready = False  # the stream or group vanished: create it
                delay = fails.failed(exc)
            else:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)


def _max_block_ms(client: Any) -> int | None:
    """How long a blocking read may wait: it must end before the connection's socket timeout
    (redis-py 8 sets 5 s by default), or an idle worker takes its own wait for a lost
    connection. None = no socket timeout."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if kwargs is None:  # cluster clients keep them on the nodes manager
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout", _DEFAULT_SOCKET_TIMEOUT)
    if not timeout:
        return None
    ms = float(timeout) * 1000
    return max(1, int(min(ms * 0.8, ms - 200)))
