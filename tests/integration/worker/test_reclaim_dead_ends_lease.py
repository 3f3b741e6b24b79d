"""A rule's run dead-lettered by a reclaim (delivered too many times) ends its overlap lease in
that dead letter's call (issue 18), as a worker's own dead letter does
(test_dead_and_cancel_end_lease.py).

reclaim.lua used to dead-letter such a run itself, without its lease key: the lease stayed
with a run that no longer lived until the rule's next fire found it stale, so a fire queued
behind it (overlap = queue) started up to an interval late. Now reclaim hands the run to the
worker that reclaimed it, and the worker's dead letter (dead.lua) ends the lease.
"""

from __future__ import annotations

from tests.integration.rules.test_schedules import T0, one_outcome_per_slot
from zsched import FakeClock
from zsched.protocol.keys import GROUP
from zsched.rules.triggers import slot_run_id
from zsched.worker.recovery import ensure_group

EVERY_S = 60


async def _fire_and_lose(real, queue, overlap):
    """Rule r fires its slot T0; a worker reads the run and dies: the entry stays pending."""
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    app.task(name="t")(lambda payload: None)
    app.schedule("r", "t", every=EVERY_S, overlap=overlap)
    d = app.dispatcher(redis=real.async_client())
    await d.tick()
    aio = real.async_client()
    await ensure_group(aio, app.keys)
    assert await aio.xreadgroup(GROUP, "died", {app.keys.ready: ">"}, count=10)
    await aio.aclose()
    return clock, app, d


async def _reclaim_past_max_deliveries(real, app):
    """The dead worker's entry made idle past the visibility timeout (XCLAIM to itself with
    IDLE; JUSTID keeps the delivery count), not slept through; a worker allowing one delivery
    reclaims it (its second) and dead-letters it."""
    rows = real.sync.xpending_range(app.keys.ready, GROUP, "-", "+", 10, consumername="died")
    real.sync.xclaim(app.keys.ready, GROUP, "died", 0, [r["message_id"] for r in rows],
                     idle=600_000, justid=True)  # fmt: skip
    w = app.worker(redis=real.async_client(), max_deliveries=1)
    try:
        assert await w.reader.tick() == 0  # nothing started: the entry is past its deliveries
        await w.flush()
    finally:
        await w.close()
    (letter,) = app.dead_letters()
    assert letter.reason == "delivered 2 times without an ack (max_deliveries 1)"
    return letter


async def test_a_fire_queued_behind_a_run_dead_lettered_by_a_reclaim_starts_at_the_dead_letter(
    real, queue
) -> None:
    clock, app, d = await _fire_and_lose(real, queue, "queue")
    first, second = slot_run_id("r", T0), slot_run_id("r", T0 + EVERY_S * 1000)
    clock.set(T0 + EVERY_S * 1000)  # the next slot waits behind the lost run
    await d.tick()
    assert one_outcome_per_slot(app, "r")[1].reason == f"queued behind {first}"
    letter = await _reclaim_past_max_deliveries(real, app)
    assert letter.run_id == first
    k, r = app.keys, real.sync
    # Before the fix: the lease still named `first` and `second` waited for the next fire.
    assert r.get(k.lease("r")) == second.encode() and not r.hexists(k.rule_waiting, "r")
    assert app.get_run(second).state == "scheduled"
    await d.close()


async def test_the_next_slot_after_a_run_dead_lettered_by_a_reclaim_fires_on_time(
    real, queue
) -> None:
    """overlap = skip: the lease ends with the dead letter (before the fix it stayed, and only
    the next fire's stale check let that slot run), and the next slot runs, not skipped."""
    clock, app, d = await _fire_and_lose(real, queue, "skip")
    letter = await _reclaim_past_max_deliveries(real, app)
    assert letter.run_id == slot_run_id("r", T0)
    assert not real.sync.exists(app.keys.lease("r"))
    clock.set(T0 + EVERY_S * 1000)
    await d.tick()
    rows = one_outcome_per_slot(app, "r")
    assert [(x.outcome, x.reason) for x in rows] == [("ran", ""), ("ran", "")]
    assert real.sync.get(app.keys.lease("r")) == slot_run_id("r", T0 + EVERY_S * 1000).encode()
    await d.close()
