"""The dispatcher: moves due runs onto the ready stream, and lets extensions (rules) fire.

It keeps the due-time timer on the client and listens on the wake channel only to hear that a
run is due sooner: Redis checks blocking timeouts only `hz` times a second, so a blocking wait
meant to end at a due time could be 100 ms late. Any number of dispatchers may run at once:
every move is one atomic script.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from zsched.clock import ServerTime
from zsched.config import DispatcherSettings, settings_from
from zsched.dispatch.heartbeat import Heartbeat, process_name
from zsched.dispatch.watch import DataWatch
from zsched.errors import EvictionPolicyError
from zsched.observability.metrics import observe_many
from zsched.rules.ops import sync_declared
from zsched.store import scripts as S
from zsched.store.connection import (
    RETRYABLE_ERRORS,
    async_client,
    async_from_sync,
    open_pubsub,
)
from zsched.store.eviction import EvictionWatch
from zsched.store.retrying import REFUSALS, PassFailures

if TYPE_CHECKING:
    from zsched.context import QueueContext

log = logging.getLogger(__name__)
#: Redis time a full dispatch call should stay under (the script reports its own). 500 runs
#: take ~2.4 ms with 200k delayed runs but ~4.5 ms with 1M (cache misses), and more on a slow
#: host, against a 5 ms budget for any script. 1 ms, not 2: a few calls run ~2.5x their
#: usual time (host pauses, rehashing), which took 2 ms calls over 5 ms (10 slow dispatch
#: calls in 6 runs of 1M, against 1 at 1 ms), at the same dispatch rate (BENCHMARKS.md).
CALL_TARGET_S = 0.001
#: The smallest call (and the first of a burst): tinier ones cost more in round trips.
MIN_CALL = 50
#: Dispatch calls in flight while runs keep coming due: with two, Redis starts the next call
#: as soon as one ends instead of idling through the round trip and this process's share.
PIPELINE_DEPTH = 2


class TickPart(Protocol):
    """Extra work a dispatcher does each pass (recurring rules). Returns its next due ms."""

    async def tick(self, now_ms: int | None) -> int | None: ...
    def invalidate(self) -> None: ...


@dataclass(frozen=True)
class TickResult:
    moved: int
    next_due_ms: int | None
    now_ms: int
    #: Dispatch waits for the stream backlog to fall under max_backlog.
    backlogged: bool
    more: bool
    #: time.monotonic() when the call that read `now_ms` was sent: Redis read its clock after
    #: that, so `now_ms` is at least this late, and the sleep until `next_due_ms` is counted
    #: from here (not from whenever this process gets to sleep).
    sent_at: float = 0.0

    @property
    def held(self) -> bool:
        """Deprecated alias of `backlogged` (its name before issue #17)."""
        return self.backlogged


class Dispatcher:
    """Dispatches due runs of one queue. `run()` loops; `tick()` does one pass."""

    def __init__(
        self, ctx: QueueContext, redis: Any = None, rules: bool = True, **settings: Any
    ) -> None:
        self.ctx = ctx
        allow_eviction = bool(settings.pop("allow_eviction", False))  # zsched/store/eviction.py
        self.settings = settings_from(DispatcherSettings, settings)
        if redis is None:
            redis = async_client(ctx.url) if ctx.url else async_from_sync(ctx.redis)
        self.redis = redis
        self.scripts = S.AsyncScripts(redis)
        self.parts: list[TickPart] = []
        if rules:
            from zsched.dispatch.firer import RuleFirer

            self.parts.append(RuleFirer(ctx, redis, self.scripts,
                                        max_backlog=self.settings.max_backlog))  # fmt: skip
        self.metrics = ctx.metrics
        self._q = ctx.queue
        self.watch = DataWatch(redis, ctx.keys, ctx.queue)
        self.eviction = EvictionWatch(redis, ctx.keys.ready, ctx.queue, "dispatcher",
                                      ctx.metrics, allow_eviction)  # fmt: skip
        # Runs per dispatch call: up to batch_size, less while full calls take longer than
        # CALL_TARGET_S (a big delayed set or a slow host), so no call holds Redis for long.
        # It starts at the floor and grows while calls are fast: the first call of a burst
        # is the slowest (a fresh `entries` hash, cold caches), and a full batch_size there
        # ran 3-10 ms on a loaded host (BENCHMARKS.md, the burst tail). A pass that moves
        # nothing puts it back at the floor, so a later burst starts small too.
        self._limit = self._floor
        #: This dispatcher's beat in `dispatchers`, for consoles (every 5 s busy, 30 s idle).
        self.heartbeat = Heartbeat(ctx.keys, process_name())
        #: The server's clock for the beat (DESIGN.md invariant 3), learned from each pass's
        #: dispatch reply: no command of its own.
        self.server_time = ServerTime(ctx.clock)
        #: Messages heard on `wake` since start (each also counts in the wakeups metric).
        self.wakeups = 0

    async def tick(self) -> TickResult:
        """Dispatch due runs in bounded batches, then run the extensions once."""
        clock = self.ctx.clock
        # Rules first: a fire due now is then dispatched in this same pass.
        part_due: int | None = None
        for part in self.parts:
            due = await part.tick(clock.now_ms())
            if due is not None and (part_due is None or due < part_due):
                part_due = due
        moved, more, r, sent_at = await self._dispatch()
        self._learn_time(r.now_ms)
        if not moved:
            # Idle: the next burst's first call meets a fresh `entries` and cold caches again,
            # so it starts at the floor, as a new dispatcher's does.
            self._limit = self._floor
        # Paused: the head of the delayed set is not a reason to wake (resume publishes on
        # wake); rule slots still are, as they are fired into the delayed set.
        next_due = None if r.paused else r.next_due_ms
        if part_due is not None and (next_due is None or part_due < next_due):
            next_due = part_due
        self.metrics.heartbeat.labels(self._q, "dispatcher").set(time.time())
        await self.heartbeat.beat(self.redis, self.server_time.now_ms())
        return TickResult(moved, next_due, r.now_ms, r.backlogged and not r.paused, more, sent_at)

    async def _dispatch(self) -> tuple[int, bool, S.DispatchResult, float]:
        """Dispatch calls until one moves less than a full batch or the pass's bound is
        reached: (runs moved, whether more are due, the last reply, when its call went out)."""
        s, k, clock = self.settings, self.ctx.keys, self.ctx.clock
        moved, more = 0, False

        def call() -> asyncio.Future[tuple[S.DispatchResult, int, float]]:
            c = S.dispatch(k, now_ms=clock.now_ms(), limit=self._limit, max_backlog=s.max_backlog)
            return asyncio.ensure_future(self._sized(c))

        inflight = [call()]
        sent = 1
        try:
            while inflight:
                r, limit, sent_at = await inflight.pop(0)
                moved += r.moved
                more = r.moved == limit and not r.backlogged
                if more:
                    self._adapt(limit, r.busy_us / 1e6)
                    # A full batch: keep PIPELINE_DEPTH calls in flight (sleep(0) lets them
                    # reach the socket), so Redis runs the next ones while this process
                    # records the lag of the batch it just moved.
                    while len(inflight) < PIPELINE_DEPTH and sent < s.max_batches_per_tick:
                        inflight.append(call())
                        sent += 1
                    await asyncio.sleep(0)
                self._observe(r)
                if not more:
                    # Nothing more due now: the calls still in flight answer (moving little
                    # or nothing); the last reply is the freshest view of the head.
                    while inflight:
                        r, limit, sent_at = await inflight.pop(0)
                        moved += r.moved
                        self._observe(r)
                    more = r.moved == limit and not r.backlogged
        except BaseException:
            for f in inflight:  # the other call in flight: stop it, or take its outcome
                if not f.cancel() and not f.cancelled():
                    f.exception()  # retrieved: no "exception was never retrieved" later
            raise
        return moved, more, r, sent_at

    def _learn_time(self, server_ms: int) -> None:
        """The server's now from a dispatch reply that just came back (the script read TIME):
        the offset is off by at most the reply's trip, plenty for a beat."""
        wall_ms = time.time() * 1000
        self.server_time.learn((server_ms // 1000, server_ms % 1000 * 1000), wall_ms, wall_ms)

    async def _sized(self, c: S.Call[S.DispatchResult]) -> tuple[S.DispatchResult, int, float]:
        sent_at = time.monotonic()
        return await self.scripts.run(c), int(c.args[1]), sent_at

    @property
    def _floor(self) -> int:
        return min(MIN_CALL, self.settings.batch_size)

    def _adapt(self, limit: int, took: float) -> None:
        """Size the next call from how long a full one ran in Redis (`took`, as the script
        measured it: a round trip measured here would count this process's own delays, and
        on a slow host that shrank every call to the floor). Never below min(50, batch_size):
        tiny calls would cost more in round trips than they save."""
        s = self.settings
        floor = self._floor
        if took > CALL_TARGET_S:
            self._limit = max(floor, int(limit * CALL_TARGET_S / took))
        else:
            # Towards the size that takes 3/4 of CALL_TARGET_S (jitter then seldom crosses it),
            # at most doubling a step (a call that takes 0, on Valkey's frozen TIME, doubles):
            # a size that starts small must not stay below the one a shrinking size settles at.
            grown = 2 * limit if took <= 0 else int(limit * 0.75 * CALL_TARGET_S / took)
            self._limit = max(limit, min(s.batch_size, 2 * limit, grown))

    def _observe(self, r: S.DispatchResult) -> None:
        if not r.moved:
            return
        self.metrics.dispatched.labels(self._q).inc(r.moved)
        now = r.now_ms
        observe_many(
            self.metrics.dispatch_lag.labels(self._q),
            [(now - at) / 1000 if at < now else 0.0 for at in r.run_at_ms],
        )

    def _sleep_s(self, t: TickResult) -> float:
        s = self.settings
        if t.more:
            return 0.0
        if t.backlogged:
            return s.backlog_poll_ms / 1000
        if t.next_due_ms is None:
            return s.max_idle_ms / 1000
        wait_ms = min(max(0, t.next_due_ms - t.now_ms), s.max_idle_ms)
        if self.ctx.clock.now_ms() is not None or not t.sent_at:
            return wait_ms / 1000  # a fake clock (tests, the simulator): its own time only
        # Counted from when the call went out: the reply's trip back and this process's work
        # since (lag metrics, the data watch) would otherwise make every timed wake that late.
        return max(0.0, wait_ms / 1000 - (time.monotonic() - t.sent_at))

    async def _migrate(self) -> bool:
        """Move a delayed set of key layout 2 (an older zsched's) into the tree, once at start,
        a bounded batch per call (zsched migrate does the same from the command line)."""
        moved = 0
        left = 1
        while left:
            n, left = await self.scripts.run(S.migrate(self.ctx.keys))
            moved += n
        if moved:
            log.warning("moved %d delayed runs of key layout 2 into key layout 3", moved,
                        extra={"queue": self._q})  # fmt: skip
        return True

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Loop until `stop` is set: tick, then sleep until the next due time or a wake-up."""
        stop = stop or asyncio.Event()
        fails = PassFailures("dispatcher", self._q, log,
                             self.metrics.redis_errors.labels(self._q, "dispatcher"))  # fmt: skip
        log.info("dispatcher started", extra={"queue": self._q})
        synced = not self.ctx.declared_here()
        migrated = False
        while not stop.is_set():
            pubsub = open_pubsub(self.redis)  # on a cluster: a connection of its own
            try:
                synced = synced or await self._sync_declared()  # Redis may be down at start
                migrated = migrated or await self._migrate()
                await pubsub.subscribe(self.ctx.keys.wake)
                self._woken()  # what was published while not subscribed is not heard
                await self.watch.check(force=True)
                await self.eviction.check(force=not self.eviction.checked)
                while not stop.is_set():
                    t = await self.tick()
                    fails.ok()
                    await self.watch.check()
                    await self.eviction.check()
                    await self._wait(pubsub, self._sleep_s(t), stop)
            except EvictionPolicyError:
                raise  # refused to start: a setting to change, not a fault to wait out
            except Exception as exc:  # noqa: BLE001 - keep dispatching other work; say so loudly
                await _sleep_or_stop(stop, fails.failed(exc))
            finally:
                try:
                    await pubsub.aclose()
                except RETRYABLE_ERRORS:
                    pass
        with contextlib.suppress(*RETRYABLE_ERRORS, *REFUSALS):
            await self.heartbeat.leave(self.redis)
        log.info("dispatcher stopped", extra={"queue": self._q})

    async def _sync_declared(self) -> bool:
        ctx = self.ctx
        result = await asyncio.to_thread(
            ctx.ride,
            "sync of declared schedules",  # App.sync_schedules, for this dispatcher's rules
            lambda _: sync_declared(ctx, ctx.declared_here()),
        )
        log.info("declared schedules synced: %s", {k: len(v) for k, v in result.items()},
                 extra={"queue": self._q})  # fmt: skip
        return True

    async def _wait(self, pubsub: Any, seconds: float, stop: asyncio.Event) -> None:
        """Wait `seconds` on the client's clock, or less if a wake-up or stop arrives."""
        if seconds <= 0:
            # Still drain pending wake-ups so they don't pile up while we are busy.
            while await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0):
                self._heard()
            return
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Check `stop` at least every 0.5 s without costing any Redis command.
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(left, 0.5))
            if msg is not None:
                self._heard()
                return
            # Asleep between passes: beat every 30 s, not 5 (the idle cost, heartbeat.py).
            await self.heartbeat.beat(self.redis, self.server_time.now_ms(), idle=True)

    def _heard(self) -> None:
        self.wakeups += 1
        self.metrics.wakeups.labels(self._q).inc()
        self._woken()

    def _woken(self) -> None:
        """Something was published on `wake`: a new earliest run, or a rule created or changed
        (schedule.lua), so the parts read their state again at the next pass."""
        for part in self.parts:
            part.invalidate()

    async def close(self) -> None:
        with contextlib.suppress(*RETRYABLE_ERRORS, *REFUSALS):
            await self.heartbeat.leave(self.redis)  # gone, not stale
        await self.redis.aclose()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
