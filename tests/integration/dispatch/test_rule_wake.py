"""A sleeping dispatcher hears of new and edited rules at once, and does not read the rules
on every pass while none is due (one round trip less before each timed dispatch)."""

from __future__ import annotations

import asyncio
import time

from zsched.observability.metrics import Metrics


async def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_rule_added_while_the_dispatcher_sleeps_fires_on_time(real, queue) -> None:
    app = real.app(queue)
    d = app.dispatcher(redis=real.async_client())  # max_idle_ms: 30 s by default
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    await asyncio.sleep(0.5)  # idle: nothing delayed, no rule; the next pass is 30 s away
    t0 = time.monotonic()
    app.schedule("tick", "t", every=1)  # first fire within a second
    await _wait_for(lambda: int(real.sync.hget(app.keys.stats, "dispatched") or 0) >= 1, 10,
                    "the new rule's first fire")  # fmt: skip
    assert time.monotonic() - t0 < 5
    stop.set()
    await asyncio.wait_for(run, 10)
    await d.close()


async def test_passes_read_the_rules_only_when_one_is_due_or_they_changed(real, queue) -> None:
    app = real.app(queue, metrics=Metrics())
    app.schedule("hourly", "t", cron="0 * * * *", tz="UTC")
    d = app.dispatcher(redis=real.async_client())
    firer = d.parts[0]
    reads = []
    pipeline = firer.redis.pipeline

    def counted(*a, **kw):
        reads.append(1)
        return pipeline(*a, **kw)

    firer.redis.pipeline = counted
    await d.tick()
    assert len(reads) == 1  # the first pass reads them
    for _ in range(5):
        await d.tick()
    assert len(reads) == 1  # nothing due, nothing changed: no round trip for rules
    app.schedule("soon", "t", every=60)
    firer.invalidate()  # what a wake message does (test_a_rule_added_... covers the message)
    await d.tick()
    assert len(reads) == 2
    await d.close()
