"""The real system under an injected clock, stepped like the model: real Dispatchers (1 to
3, ticked), a real Worker (its own loop, on the real redis-server) whose async handler holds
each attempt until the clock reaches the end its fate says, then succeeds, retries or fails.

At one instant: release the handlers whose time is up and wait until the worker wrote their
outcome; tick every dispatcher that is up (each hears a wake-up first, as a sleeping one would:
every rule operation and unlease publish one); wait until the worker started every run on
the stream; again until nothing changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import zsched
from tests.model.rule_model import Fate, RuleDef
from zsched import FakeClock
from zsched.rules.ledger import history
from zsched.rules.triggers import Every
from zsched.store.delayed import untag

#: Real seconds any one wait may take before the harness calls the system stuck.
STUCK_S = 15.0


def _is_worker_loop(t: asyncio.Task[Any], w: Any) -> bool:
    """Whether `t` is one of the loops `w.run()` started (each runs under `w.guard`)."""
    frame = t.get_coro().cr_frame  # type: ignore[union-attr]
    return frame is not None and frame.f_locals.get("self") is w.guard


def _name(t: asyncio.Task[Any]) -> str:
    return f"{t.get_coro().__qualname__}:{'done' if t.done() else 'pending'}"  # type: ignore[union-attr]


class RealSystem:
    def __init__(self, real: Any, queue: str, rule: RuleDef, fate_of: Callable[[str, int], Fate],
                 start_ms: int, dispatchers: int = 1) -> None:  # fmt: skip
        self.real, self.rule, self.fate_of = real, rule, fate_of
        self.clock = FakeClock(start_ms)
        self.app = real.app(queue, clock=self.clock)
        self.sid = rule.schedule_id
        self.up = True
        #: (run id, attempt) -> [finish ms, event, fate, released]
        self.gates: dict[tuple[str, int], list[Any]] = {}
        self.started: list[tuple[str, int, int]] = []
        self.app.task(name="t", max_attempts=5)(self._handler)
        self.dispatchers = [self.app.dispatcher(redis=real.async_client())
                            for _ in range(dispatchers)]  # fmt: skip
        self.worker = self._new_worker()
        self._stop = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        #: Attempts started again by a worker that reclaimed them (not a second fire).
        self.reclaimed: list[tuple[str, int, int]] = []

    def _new_worker(self) -> Any:
        # A short visibility timeout (real time): a dead worker's runs are reclaimed at once.
        # Reclaims do not count toward dead-lettering here: the model reclaims without limit.
        return self.app.worker(redis=self.real.async_client(), concurrency=64,
                               visibility_timeout_ms=300, max_deliveries=1000)  # fmt: skip

    async def _handler(self, payload: Any) -> None:
        info = zsched.current_run()
        key = (info.run_id, info.attempt)
        fate = self.fate_of(*key)
        now = self.clock.now_ms()
        gate = [now + fate.duration_ms, asyncio.Event(), fate, False]
        self.gates[key] = gate
        (self.reclaimed if info.deliveries > 1 else self.started).append((*key, now))
        await gate[1].wait()
        if fate.kind == "retry":
            raise zsched.Retry(delay=fate.retry_delay_ms / 1000)
        if fate.kind == "fail":
            raise zsched.Fail("its fate")

    async def start(self) -> None:
        self._loop = asyncio.create_task(self.worker.run(self._stop))

    async def close(self) -> None:
        for _, ev, _, _ in self.gates.values():
            ev.set()
        self._stop.set()
        if self._loop is not None:
            await asyncio.wait_for(self._loop, 30)
        for d in self.dispatchers:
            await d.close()
        await self.worker.close()

    # -- operations ---------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        r = self.rule
        trig = r.trigger
        opts: dict[str, Any] = {"misfire": r.misfire, "overlap": r.overlap,
                                "max_catch_up": r.max_catch_up, "jitter": r.jitter_ms / 1000}  # fmt: skip
        if r.grace_ms is not None:
            opts["misfire_grace"] = r.grace_ms / 1000
        if isinstance(trig, Every):
            opts.update(every=trig.interval_ms / 1000, start_at=trig.start_ms / 1000)
        else:
            opts.update(cron=trig.expr, tz=trig.tz, dst_gap=trig.dst_gap,
                        dst_repeat=trig.dst_repeat)  # fmt: skip
        return opts

    async def create(self, paused: bool = False) -> None:
        self.app.schedule(self.sid, "t", paused=paused, **self._options())
        await self.settle()

    async def edit(self, rule: RuleDef, declared: bool = False) -> None:
        """schedule() the new definition, or declare it and sync (as a dispatcher start does)."""
        self.rule = rule
        if declared:
            self.app.declare(self.sid, "t", **self._options())
            self.app.sync_schedules()
        else:
            self.app.schedule(self.sid, "t", **self._options())
        await self.settle()

    async def pause(self) -> None:
        self.app.pause_schedule(self.sid)
        await self.settle()

    async def resume(self) -> None:
        self.app.resume_schedule(self.sid)
        await self.settle()

    async def backfill(self, lo: int, hi: int) -> None:
        self.app.backfill(self.sid, lo / 1000, hi / 1000)
        await self.settle()

    async def run_now(self, force: bool = False) -> None:
        self.app.run_schedule_now(self.sid, force=force)
        await self.settle()

    async def pause_queue(self) -> None:
        self.app.pause_queue()
        await self.settle()

    async def resume_queue(self) -> None:
        self.app.resume_queue()
        await self.settle()

    async def remove(self) -> None:
        self.app.unschedule(self.sid)
        await self.settle()

    async def kill_worker(self) -> None:
        """The worker dies mid-run (nothing handed back, no outcome written); a new one
        reclaims its runs after the visibility timeout and runs them again."""
        # Only the worker's own tasks (its run(), its three loops, its handlers): cancelling
        # every task of the loop, as this once did, also cancelled the clients' own tasks.
        old = self.worker
        doomed = [t for t in asyncio.all_tasks()
                  if t is self._loop or t in old.runner.tasks or _is_worker_loop(t, old)]  # fmt: skip
        for t in doomed:
            t.cancel()
        gone = asyncio.gather(*doomed, return_exceptions=True)
        await self._bounded(gone, "the dead worker's tasks to end", doomed)
        await self._bounded(old.close(), "the dead worker's clients to close")
        self.gates = {k: g for k, g in self.gates.items() if g[3]}  # those handlers died
        self.worker = self._new_worker()
        self._stop = asyncio.Event()
        await self.start()
        await self.settle()

    async def set_up(self, up: bool) -> None:
        self.up = up
        await self.settle()

    async def advance_to(self, t: int) -> None:
        while True:
            e = await self.next_event()
            if e is None or e > t:
                break
            self.clock.set(e)
            await self.settle()
        self.clock.set(t)
        await self.settle()

    # -- what can be read ---------------------------------------------------------------------

    def ledger(self) -> list[tuple[int, str, str]]:
        return sorted((h["slot_ms"], h["outcome"], h["reason"])
                      for h in history(self.app.redis, self.app.keys, self.sid, 10**6))  # fmt: skip

    def live(self) -> set[str]:
        return {m.decode() for m in self.real.sync.hkeys(self.app.keys.runs)}

    def lease(self) -> str | None:
        raw = self.real.sync.get(self.app.keys.lease(self.sid))
        return raw.decode() if raw is not None else None

    def waiting(self) -> bool:
        return bool(self.real.sync.hexists(self.app.keys.rule_waiting, self.sid))

    async def next_event(self) -> int | None:
        t = self.clock.now_ms()
        r, k = self.real.sync, self.app.keys
        cands = [g[0] for g in self.gates.values() if not g[3]]
        if self.up:
            head = r.zrange(k.rule_next, 0, 0, withscores=True)
            if head:
                cands.append(int(head[0][1]))
            cands += [due for due in self._delayed_dues()]
            blocked = any(p.blocked for d in self.dispatchers for p in d.parts)
            if r.zcard(k.rule_catchup) and not blocked:
                cands.append(t + 20)
        later = [c for c in cands if c > t]
        return min(later) if later else None

    def _delayed_dues(self) -> list[int]:
        out = []
        for raw in self.real.sync.hvals(self.app.keys.runs):
            due, _ = untag(raw)
            if due is not None:
                out.append(due)
        return out

    # -- one instant --------------------------------------------------------------------------

    async def settle(self) -> None:
        for _ in range(1000):
            before = len(self.started)  # handlers start on their own once a run is dispatched
            changed = await self._release()
            if self.up:
                for d in self.dispatchers:
                    for p in d.parts:
                        p.invalidate()  # as the wake message of an operation or unlease does
                    await d.tick()
            await self._picked_up()
            if not changed and len(self.started) == before:
                return
        raise AssertionError("the real system did not settle")

    async def _release(self) -> bool:
        now = self.clock.now_ms()
        due = [(key, g) for key, g in self.gates.items() if not g[3] and g[0] <= now]
        for _, g in due:
            g[3] = True
            g[1].set()
        for key, g in due:
            await self._until(lambda key=key, g=g: self._written(key, g[2]),
                              f"the outcome of {key}")  # fmt: skip
        return bool(due)

    def _written(self, key: tuple[str, int], fate: Fate) -> bool:
        """The worker wrote the attempt's outcome: its stream entry is gone (a run's value
        in `runs` keeps its due tag while on the stream, so that says nothing), and a
        finished run freed its lease."""
        rid, k = key[0], self.app.keys
        if self.real.sync.hexists(k.entries, rid):
            return False
        return fate.kind == "retry" or self.lease() != rid

    async def _picked_up(self) -> None:
        """Wait until every run on the stream is running in a handler."""
        r, k = self.real.sync, self.app.keys

        def all_running() -> bool:
            n = r.xlen(k.ready)
            active = sum(1 for g in self.gates.values() if not g[3])
            return n == active

        await self._until(all_running, "the worker to start every ready run")

    async def _bounded(self, aw: Any, what: str, tasks: Any = ()) -> None:
        try:
            await asyncio.wait_for(aw, STUCK_S)
        except TimeoutError:
            left = [_name(t) for t in tasks if not t.done()]
            raise AssertionError(f"real system stuck waiting for {what} {left}") from None

    async def _until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STUCK_S
        while not cond():
            assert time.monotonic() < deadline, f"real system stuck waiting for {what}"
            await asyncio.sleep(0.002)
