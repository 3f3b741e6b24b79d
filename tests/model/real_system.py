"""The real system under an injected clock, stepped like the model: real Dispatchers (1 to
3, racing: see Racer) and real Workers (1 to 3, each in a child process:
tests/model/workers.py) on the real redis-server; a handler holds each attempt until the
clock reaches the end its fate says, then succeeds, retries or fails.

At one instant: release the handlers whose time is up and wait until a worker wrote their
outcome; every dispatcher that is up hears what was published on the queue's wake channel
(rule operations, unlease, retries publish there); those woken, whose timer is up, or whose
last pass left work, pass at once, concurrently (their calls interleave on the server); wait
until the workers started every run on the stream; again until nothing changes. A worker
dies by SIGKILL; time enough passes for its entries' visibility timeout (the harness ages
them: Redis counts idle time in real time, which the FakeClock does not move), and a new
worker reclaims them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

import zsched.dispatch.firer
from tests.model import slots as calendar
from tests.model.rule_model import MAX_ATTEMPTS, Fate, RuleDef
from tests.model.workers import STUCK_S, ChildWorker, SharedClock
from zsched.dispatch.dispatcher import Dispatcher
from zsched.protocol.keys import GROUP
from zsched.rules.ledger import history
from zsched.rules.triggers import Every
from zsched.runs.status import is_entry_id
from zsched.store.delayed import untag

#: The workers' visibility timeout (real time): long, so that no live worker's entry is ever
#: reclaimed however loaded the machine; a dead worker's entries are aged past it instead.
VISIBILITY_MS = 600_000


@dataclass
class Gate:
    """One attempt a handler holds: until `finish` (clock ms), then its fate."""

    finish: int
    fate: Fate
    worker: ChildWorker
    released: bool = False


async def _never(payload: Any) -> None:
    """Task "t" in the parent's App (handlers run in the workers' processes)."""


@dataclass
class Racer:
    """One real Dispatcher, passing when its run() loop would (Dispatcher.run/_wait): when a
    wake-up was heard on its own subscription (Dispatcher._woken: the parts read the rules
    again), when its timer is up (the due time its last pass returned, on the FakeClock), or
    at once when its last pass left work. Never on a safety poll: an operation that does not
    wake it is seen by no dispatcher (RealSystem sets the rules' recheck out of reach)."""

    d: Dispatcher
    pubsub: Any
    woken: bool = True  # run() invalidates when it (re)subscribes
    due_at: int | None = None
    more: bool = False

    def due(self, now: int) -> bool:
        return self.woken or self.more or (self.due_at is not None and self.due_at <= now)

    async def tick(self) -> None:
        self.woken = False
        t = await self.d.tick()
        self.more, self.due_at = t.more, t.next_due_ms

    def restart(self) -> None:
        """Up again: subscribed anew, and as run() does then, the rules are read again (what
        was published meanwhile is lost)."""
        self.d._woken()
        self.woken, self.due_at, self.more = True, None, False


class RealSystem:
    def __init__(self, real: Any, queue: str, rule: RuleDef, fate_of: Callable[[str, int], Fate],
                 start_ms: int, dispatchers: int = 1, workers: int = 1) -> None:  # fmt: skip
        self.real, self.rule, self.fate_of = real, rule, fate_of
        #: (since, trigger): each trigger is in force for the slots after `since` (the edit).
        self.triggers: list[tuple[int, Any]] = [(-(2**63), rule.trigger)]
        self.clock = SharedClock(start_ms)
        self.app = real.app(queue, clock=self.clock)
        self.queue, self.sid = queue, rule.schedule_id
        self.up = True
        self.gates: dict[tuple[str, int], Gate] = {}
        self.started: list[tuple[str, int, int]] = []
        self.app.task(name="t", max_attempts=MAX_ATTEMPTS)(_never)
        self.dispatchers = [self.app.dispatcher(redis=real.async_client())
                            for _ in range(dispatchers)]  # fmt: skip
        self.racers = [Racer(d, d.redis.pubsub()) for d in self.dispatchers]
        #: Published after the wake-ups an instant made: heard, every one before it was too.
        self.barrier = f"zsched-model-barrier-{queue}"
        # Only a wake-up tells a dispatcher of a change (the 5 s recheck would hide a missing
        # one, or not, depending on how loaded the machine is); restored at close().
        self._recheck = zsched.dispatch.firer.RULES_RECHECK_S
        zsched.dispatch.firer.RULES_RECHECK_S = 1e9
        self.n_workers = workers
        self.workers: list[ChildWorker] = []
        #: Attempts started again by a worker that reclaimed them (not a second fire).
        self.reclaimed: list[tuple[str, int, int]] = []

    def _on_run(self, worker: ChildWorker, ev: dict[str, Any]) -> None:
        key, now = (ev["run_id"], ev["attempt"]), ev["now"]
        fate = self.fate_of(*key)
        self.gates[key] = Gate(now + fate.duration_ms, fate, worker)
        (self.reclaimed if ev["deliveries"] > 1 else self.started).append((*key, now))

    async def _new_worker(self) -> ChildWorker:
        w = ChildWorker(asyncio.get_running_loop())
        await w.start(self.real.url, self.queue, self.clock, VISIBILITY_MS,
                      functools.partial(self._on_run, w))  # fmt: skip
        return w

    async def start(self) -> None:
        """Subscribe the dispatchers, start the workers (in parallel: each child answers on
        its own)."""
        for r in self.racers:
            await r.pubsub.subscribe(self.app.keys.wake, self.barrier)
        self.workers = list(await asyncio.gather(*(self._new_worker()
                                                   for _ in range(self.n_workers))))  # fmt: skip

    async def close(self) -> None:
        try:
            stopped = await asyncio.gather(*(w.stop() for w in self.workers),
                                           return_exceptions=True)  # fmt: skip
            for outcome in stopped:
                if isinstance(outcome, BaseException):
                    raise outcome
        finally:
            zsched.dispatch.firer.RULES_RECHECK_S = self._recheck
            for r in self.racers:
                await r.pubsub.aclose()
                await r.d.close()
            self.clock.close()

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
        if rule.trigger != self.rule.trigger:
            self.triggers.append((self.clock.now_ms(), rule.trigger))
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

    def held_by(self, index: int) -> set[str]:
        """Run ids whose attempt worker `index` (modulo the workers) is running."""
        w = self.workers[index % len(self.workers)]
        return {k[0] for k, g in self.gates.items() if g.worker is w and not g.released}

    async def kill_worker(self, index: int) -> None:
        """Worker `index` (modulo the workers) dies mid-run: SIGKILL, nothing handed back,
        no outcome written. A new worker takes its place and, once its entries are idle past
        the visibility timeout, reclaims them and runs them again (same attempt)."""
        i = index % len(self.workers)
        dead = self.workers[i]
        dead.kill()
        self.gates = {k: g for k, g in self.gates.items() if g.worker is not dead}
        self._age(dead.consumer)
        self.workers[i] = await self._new_worker()
        await self.workers[i].reclaim()
        await self.settle()

    def _age(self, consumer: str) -> None:
        """The visibility timeout passes for `consumer`'s entries (XCLAIM to itself with IDLE;
        JUSTID: the delivery count stays)."""
        r, k = self.real.sync, self.app.keys
        try:
            rows = r.xpending_range(k.ready, GROUP, "-", "+", 10_000, consumername=consumer)
        except redis.exceptions.ResponseError as exc:  # killed before any group was made:
            if "NOGROUP" not in str(exc):  # it held nothing (make model found this)
                raise
            return
        ids = [row["message_id"] for row in rows]
        if ids:
            r.xclaim(k.ready, GROUP, consumer, 0, ids, idle=10 * VISIBILITY_MS, justid=True)

    async def set_up(self, up: bool) -> None:
        await self._hear()  # what was published before, heard (up) or lost (down)
        self.up = up
        for r in self.racers if up else []:
            r.restart()
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
        """(slot, outcome, reason) per slot: an entry for a range of slots (a long pause) once
        for each slot in it of the trigger in force at its last slot (_trigger_at)."""
        rows = history(self.app.redis, self.app.keys, self.sid, 10**6)
        return sorted((s, h["outcome"], h["reason"]) for h in rows
                      for s in ([h["slot_ms"]] if h["last_ms"] == h["slot_ms"] else
                                calendar.slots_between(self._trigger_at(h["last_ms"]),
                                                       h["slot_ms"] - 1, h["last_ms"],
                                                       10**7)))  # fmt: skip

    def _trigger_at(self, ms: int) -> Any:
        """The trigger whose slots a range entry ending at `ms` lists: the one in force then
        (an edit of a paused rule records the old trigger's slots up to the edit, the resume
        the new one's after it; expanding an old range with the new trigger misread it)."""
        return [t for since, t in self.triggers if since < ms][-1]

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
        cands = [g.finish for g in self.gates.values() if not g.released]
        if self.up:
            head = r.zrange(k.rule_next, 0, 0, withscores=True)
            if head:
                cands.append(int(head[0][1]))
            cands += [due for due in self._delayed_dues()]
            blocked = any(p.blocked for d in self.dispatchers for p in d.parts)
            if r.zcard(k.rule_catchup) and not blocked:
                cands.append(t + 20)
        # Not the dispatchers' timers: while replays wait for a run of days to end, each
        # would pass every second (CATCH_UP_BLOCKED_MS, a poll behind unlease's wake-up), and
        # a random example stepped through them for over 15 minutes. A timer that is up
        # counts at the next instant above (Racer.due); one that is late shows as a divergence.
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

    def conflicts(self) -> int:
        """Fires a dispatcher planned and lost to another's (the fire script's compare-and-set)."""
        return sum(getattr(p, "conflicts", 0) for d in self.dispatchers for p in d.parts)

    async def settle(self) -> None:
        for i in range(1000):
            before = len(self.started)  # handlers start on their own once a run is dispatched
            changed = await self._release()
            await self._hear()
            now = self.clock.now_ms()
            due = [r for r in self.racers if self.up and r.due(now)]
            # All at once, each round another first: which one's fire wins is the server's
            # interleaving of their calls.
            due = due[i % len(due) :] + due[: i % len(due)] if due else due
            await asyncio.gather(*(r.tick() for r in due))
            await self._picked_up()
            if not changed and not due and len(self.started) == before:
                return
        raise AssertionError("the real system did not settle")

    async def _hear(self) -> None:
        """Every dispatcher reads its subscription up to the barrier published now: each
        wake-up before it wakes the dispatcher (while up; a dispatcher down hears nothing)."""
        self.real.sync.publish(self.barrier, b"")
        for r in self.racers:
            deadline = time.monotonic() + STUCK_S
            while True:
                msg = await r.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                assert time.monotonic() < deadline, "the barrier was never heard"
                if msg is None:
                    continue
                if msg["channel"].decode() == self.barrier:
                    break
                if self.up:
                    r.d._woken()
                    r.woken = True

    async def _release(self) -> bool:
        now = self.clock.now_ms()
        due = [(key, g) for key, g in self.gates.items() if not g.released and g.finish <= now]
        for (rid, attempt), g in due:
            g.released = True
            g.worker.release(rid, attempt, g.fate.kind, g.fate.retry_delay_ms)
        for key, g in due:
            await self._until(lambda key=key, g=g: self._written(key, g.fate),
                              f"the outcome of {key}")  # fmt: skip
        return bool(due)

    def _written(self, key: tuple[str, int], fate: Fate) -> bool:
        """The worker wrote the attempt's outcome: its stream entry is gone (its value in
        `runs` is no longer an entry id: lua/lib/current.lua), and a
        finished run freed its lease. Or a fire that waited under the same run id (a manual
        fire whose forced twin went dead) took the lease again: that run is live again
        (found by make model: waiting for the lease to change hung here)."""
        rid, k = key[0], self.app.keys
        v = self.real.sync.hget(k.runs, rid)
        if is_entry_id(v):
            return False
        retried = fate.kind == "retry" and key[1] < MAX_ATTEMPTS  # else a dead letter
        return retried or self.lease() != rid or rid in self.live()

    async def _picked_up(self) -> None:
        """Wait until every run on the stream is running in a handler."""
        r, k = self.real.sync, self.app.keys

        def all_running() -> bool:
            n = r.xlen(k.ready)
            active = sum(1 for g in self.gates.values() if not g.released)
            return n == active

        await self._until(all_running, "the worker to start every ready run")

    async def _until(self, cond: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STUCK_S
        while not cond():
            assert time.monotonic() < deadline, (
                f"real system stuck waiting for {what}: lease {self.lease()!r}, live "
                f"{sorted(self.live())}, on the stream {self.real.sync.xlen(self.app.keys.ready)} entries"
            )
            await asyncio.sleep(0.002)
