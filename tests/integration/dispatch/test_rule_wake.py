"""A sleeping dispatcher hears of new and edited rules at once, and does not read the rules
on every pass while none is due (one round trip less before each timed dispatch)."""

from __future__ import annotations

import asyncio

from tests.passes import HOUR_MS, Passes
from zsched.observability.metrics import Metrics


async def test_a_rule_added_while_the_dispatcher_sleeps_fires_on_time(real, queue) -> None:
    """Idle for an hour (nothing delayed, no rule), the dispatcher passes again when the rule
    is written: schedule.lua's wake-up, counted, not its poll; the slot it then learns is the
    one that fires, on the timer of that pass. No time is measured (bench/wake.py does)."""
    app = real.app(queue, metrics=Metrics())
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=HOUR_MS)
    passes = Passes(d)
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        idle = await passes.next()
        assert idle.next_due_ms is None and d.wakeups == 0
        await asyncio.to_thread(app.schedule, "tick", "t", every=1)
        woken = await passes.next()
        assert woken.wakeups >= 1 and woken.next_due_ms is not None
        assert app.metrics.wakeups.labels(queue)._value.get() >= 1  # the metric counts it
        await passes.until(lambda: int(real.sync.hget(app.keys.stats, "dispatched") or 0) >= 1)
        first = app.schedule_history("tick")[-1]  # the oldest (newest first)
        assert (first["slot_ms"], first["outcome"]) == (woken.next_due_ms, "ran")
    finally:
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
