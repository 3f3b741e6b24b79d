"""The simulator agrees slot for slot with a real run (a real worker on real Redis) for every
misfire x overlap combination (issue 18, defect 4: it disagreed for overlap=queue), with instant
runs and with runs that outlast the interval."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.rules.test_schedules import T0, H, M
from zsched import FakeClock
from zsched.dispatch.simulate import ledger_rows, simulate


async def _real_run(app: Any, real: Any, clock: FakeClock, start: int, end: int) -> None:
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    t = start
    while t <= end:
        clock.set(t)
        # Again while runs come ready at this instant: a real dispatcher hears unlease start
        # a waiting fire (wake) and dispatches it at once.
        await d.tick()
        while await w.tick():
            await d.tick()
        nxt = app.schedules()[0]
        t = min(nxt.next_fire_ms, t + 20) if nxt.catch_up_waiting else nxt.next_fire_ms
    await d.close()
    await w.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
async def test_the_simulator_and_a_real_run_agree(real, queue, misfire, overlap) -> None:
    clock = FakeClock(T0 - 1)
    app = real.app(queue, clock=clock)

    @app.task(name="t")
    def t(payload: Any) -> None:
        pass

    app.schedule("r", "t", cron="*/15 * * * *", tz="Europe/Berlin", misfire=misfire,
                 max_catch_up=3, overlap=overlap)  # fmt: skip
    down_from, down_to = T0, T0 + 2 * H + 7 * M
    predicted = await asyncio.to_thread(simulate, app, "r", down_from, down_to)
    await _real_run(app, real, clock, down_to, predicted[-1].slot_ms)
    actual = ledger_rows(app, "r")
    assert [(r.slot_ms, r.outcome, r.reason) for r in actual] == [
        (r.slot_ms, r.outcome, r.reason) for r in predicted
    ]


SLOW_MS = 20 * M  # longer than the rule's 15-minute interval


class _SlowWorker:
    """A real worker whose handlers take SLOW_MS of the fake clock: each waits on a gate the
    test opens when the clock reaches its end, then the worker writes its outcome (ack, unlease)."""

    def __init__(self, app: Any, real: Any) -> None:
        self.w = app.worker(redis=real.async_client())
        self.gates: dict[str, asyncio.Event] = {}
        self.running: dict[str, tuple[int, Any]] = {}  # run id -> (end ms, delivery)

        @app.task(name="t")
        async def t(payload: Any) -> None:
            import zsched

            await self.gates.setdefault(zsched.current_run().run_id, asyncio.Event()).wait()

    async def start_ready(self, now: int) -> int:
        await self.w.setup()
        batch = await self.w.reader.read(100, None)
        for d in batch:
            self.w.runner.start(d)
            self.running[d.run_id] = (now + SLOW_MS, d)
        return len(batch)

    async def finish(self, now: int) -> None:
        done = [rid for rid, (end, _) in self.running.items() if end <= now]
        for rid in done:
            _, d = self.running.pop(rid)
            self.gates.setdefault(rid, asyncio.Event()).set()
            await d.exec_task
        if done:
            await self.w.flush()

    def next_end(self) -> int | None:
        return min((end for end, _ in self.running.values()), default=None)


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
async def test_the_simulator_and_a_real_run_with_slow_runs_agree(real, queue, misfire, overlap):
    """The same with runs that outlast the interval (20 min on a 15-minute rule): a real
    worker's handlers held on the fake clock, against the simulator's --slow-runs."""
    clock = FakeClock(T0 - 1)
    app = real.app(queue, clock=clock)
    slow = _SlowWorker(app, real)
    app.schedule("r", "t", cron="*/15 * * * *", tz="Europe/Berlin", misfire=misfire,
                 max_catch_up=3, overlap=overlap)  # fmt: skip
    down_from, down_to = T0, T0 + 2 * H + 7 * M
    predicted = await asyncio.to_thread(
        simulate, app, "r", down_from, down_to, slow_runs_s=SLOW_MS / 1000
    )
    d = app.dispatcher(redis=real.async_client())
    t, end = down_to, predicted[-1].slot_ms
    while t <= end:
        clock.set(t)
        await slow.finish(t)  # a run that ends frees the lease before this instant's slot
        await d.tick()
        while await slow.start_ready(t):
            await d.tick()
        nxt = app.schedules()[0]
        candidates = [nxt.next_fire_ms, slow.next_end()]
        if nxt.catch_up_waiting and not slow.running:
            candidates.append(t + 20)
        t = min(c for c in candidates if c is not None and c > t)
    actual = ledger_rows(app, "r")
    assert [(r.slot_ms, r.outcome, r.reason) for r in actual] == [
        (r.slot_ms, r.outcome, r.reason) for r in predicted
    ]
    for rid in list(slow.running):
        slow.gates.setdefault(rid, asyncio.Event()).set()
    await slow.w.drain()
    await d.close()
    await slow.w.close()
