"""How soon a running dispatcher acts on a rule operation: `python -m bench.wake [--rounds 20]`.

Issue 18, defect 1: "a running dispatcher acts on each [rule operation] within
milliseconds". One private redis-server, one Dispatcher (its run loop, real clock) whose
idle poll is an hour, so every pass after an operation comes from the wake-up the
operation published, or from a timer that pass set. The operations are sent from a thread
of the same process (an App on its own sync client), round after round, interleaved:

- create, edit, resume, declared sync: op sent -> the first pass after the wake-up that
  learned the rule's new next slot ("acted"), and that slot -> the pass that fired it
  ("fire late"; `every=1` or `every=2` rules, `misfire="skip"`);
- backfill (an hourly rule, three fresh hours a round): op sent -> the pass that moved the
  backfilled runs onto the stream;
- pause, remove: they publish nothing (they take the rule out of `rule_next` in the same
  script), so there is no latency to measure: the figure is how many of the rule's slots
  fired after the call returned (0 is the contract), checked through the slot it would have
  fired next.

Times are `time.perf_counter()` in this process (op sent, pass ended) and, for the fire,
the pass's end on the wall clock against the slot (Redis runs on this host: one clock).
Figures are medians and p99 (nearest rank) over the rounds; the load average is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .common import client, percentile, server

HOUR_MS = 3_600_000
#: A net for one wait (a pass that never comes is a failure to report, not to wait out).
NET_S = 30.0
OPS = ("create", "edit", "pause", "resume", "remove", "backfill", "sync")


@dataclass(frozen=True)
class Pass:
    wakeups: int  # Dispatcher.wakeups when the pass began
    moved: int
    next_due_ms: int | None
    ended: float  # perf_counter
    ended_wall_ms: float


class Watch:
    """Every pass of one dispatcher's run loop, in order (its tick wrapped on the instance)."""

    def __init__(self, d: Any) -> None:
        self.d = d
        self.q: asyncio.Queue[Pass] = asyncio.Queue()
        tick = d.tick

        async def observed() -> Any:
            w = d.wakeups
            t = await tick()
            self.q.put_nowait(Pass(w, t.moved, t.next_due_ms, time.perf_counter(),
                                   time.time() * 1000))  # fmt: skip
            return t

        d.tick = observed

    async def first(self, cond: Callable[[Pass], bool]) -> Pass:
        while True:
            p = await asyncio.wait_for(self.q.get(), NET_S)
            if cond(p):
                return p


class Bench:
    def __init__(self, url: str, queue: str) -> None:
        import zsched

        self.sync = client(url)
        self.app = zsched.App(self.sync, queue=queue)
        self.url = url
        self.acted: dict[str, list[float]] = {op: [] for op in OPS}
        self.late: dict[str, list[float]] = {op: [] for op in OPS}
        self.fired_after: dict[str, int] = {"pause": 0, "remove": 0}
        #: How long each operation's call took (ms), all operations together.
        self.calls: list[float] = []
        self.round = 0

    def _dispatched(self) -> int:
        return int(self.sync.hget(self.app.keys.stats, "dispatched") or 0)

    def _next(self, sid: str) -> int:
        score = self.sync.zscore(self.app.keys.rule_next, sid)
        assert score is not None, f"rule {sid} has no next slot"
        return int(score)

    async def _send(self, op: Callable[[], Any]) -> tuple[float, int]:
        """Run `op` in a thread; (when it was sent, wake-ups heard before). How long the
        call itself took goes to `calls`."""
        before = self.watch.d.wakeups
        box: list[float] = []

        def timed() -> None:
            box.append(time.perf_counter())
            op()
            box.append(time.perf_counter())

        await asyncio.to_thread(timed)
        self.calls.append((box[1] - box[0]) * 1000)
        return box[0], before

    async def _learns(self, name: str, sid: str, op: Callable[[], Any]) -> None:
        sent, before = await self._send(op)
        slot = self._next(sid)
        p = await self.watch.first(lambda p: p.wakeups > before
                                   and (p.next_due_ms == slot or p.moved > 0))  # fmt: skip
        self.acted[name].append((p.ended - sent) * 1000)
        fired = p if p.moved > 0 else await self.watch.first(lambda p: p.moved > 0)
        self.late[name].append(fired.ended_wall_ms - slot)

    async def _stops(self, name: str, sid: str, op: Callable[[], Any]) -> None:
        slot = self._next(sid)  # what it would fire next
        count = self._dispatched()
        sent, _ = await self._send(op)
        # The pass on the timer set for that slot reads the rules: the rule is gone from them.
        await self.watch.first(lambda p: p.ended > sent and p.next_due_ms != slot)
        self.fired_after[name] += self._dispatched() - count

    async def one_round(self) -> None:
        a, i = self.app, self.round
        self.round += 1
        await self._learns("create", "r", lambda: a.schedule("r", "t", every=1, misfire="skip"))
        await self._learns("edit", "r", lambda: a.schedule("r", "t", every=2, misfire="skip"))
        await self._stops("pause", "r", lambda: a.pause_schedule("r"))
        await self._learns("resume", "r", lambda: a.resume_schedule("r"))
        await self._stops("remove", "r", lambda: a.unschedule("r"))
        end = self.base_ms - 3 * i * HOUR_MS - 60_000
        sent, before = await self._send(lambda: a.backfill("b", _dt(end - 3 * HOUR_MS), _dt(end)))
        p = await self.watch.first(lambda p: p.wakeups > before and p.moved > 0)
        self.acted["backfill"].append((p.ended - sent) * 1000)
        await self._learns("sync", "s", self._sync)
        a.unschedule("s")

    def _sync(self) -> None:
        import zsched

        other = zsched.App(self.sync, queue=self.app.queue)  # a deploy declaring its rules
        other.declare("s", "t", every=1, misfire="skip")
        other.sync_schedules()

    async def run(self, rounds: int) -> None:
        from zsched.clock import time_reply_ms

        self.base_ms = time_reply_ms(self.sync.time()) // HOUR_MS * HOUR_MS
        self.app.schedule("b", "t", cron="0 * * * *", tz="UTC")
        d = self.app.dispatcher(redis=_aclient(self.url), max_idle_ms=HOUR_MS)
        self.watch = Watch(d)
        stop = asyncio.Event()
        loop = asyncio.create_task(d.run(stop))
        try:
            await self.watch.first(lambda p: True)  # its first pass: asleep from here
            for _ in range(rounds):
                await self.one_round()
        finally:
            stop.set()
            await loop
            await d.close()


def _dt(ms: int) -> Any:
    from zsched.clock import ms_to_datetime

    return ms_to_datetime(ms)


def _aclient(url: str) -> Any:
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url, protocol=2)


def _row(name: str, values: list[float]) -> str:
    if not values:
        return "–"
    return f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.wake")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the seven operations")
    a = ap.parse_args(argv)
    logging.getLogger("zsched").setLevel(logging.ERROR)  # the syncs' "not declared" notes
    load0 = os.getloadavg()[0]
    with server() as srv:
        b = Bench(srv.url, "wake")
        asyncio.run(b.run(a.rounds))
    load1 = os.getloadavg()[0]
    print(f"rounds {a.rounds}, load average {load0:.1f} -> {load1:.1f}, cores {os.cpu_count()}")
    print("| operation | n | op sent -> acted, ms (median / p99) | slot -> fired, ms (median / p99)"
          " | slots fired after the op |")  # fmt: skip
    print("|---|---|---|---|---|")
    for op in OPS:
        n = len(b.acted[op]) or a.rounds
        after = str(b.fired_after[op]) if op in b.fired_after else "–"
        acted = _row(op, b.acted[op]) if op not in b.fired_after else "atomic (no wake needed)"
        print(f"| {op} | {n} | {acted} | {_row(op, b.late[op])} | {after} |")
    print(f"the operations' own calls (all, in the 'acted' figures): {_row('', b.calls)} ms")
    return {"acted_ms": b.acted, "late_ms": b.late, "fired_after": b.fired_after,
            "call_ms": b.calls, "load": [load0, load1]}  # fmt: skip


if __name__ == "__main__":
    main()
