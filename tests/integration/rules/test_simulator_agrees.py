"""The simulator agrees slot for slot with a real run (a real worker on real Redis) for every
misfire x overlap combination (issue 18, defect 4: it disagreed for overlap=queue)."""

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
