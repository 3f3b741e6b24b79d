"""Every rule operation wakes a sleeping dispatcher (issue 18, defect 1): create, edit, resume,
backfill and declared sync make the rule's next fire (or run) happen without waiting for the
dispatcher's idle poll. Pause and remove need no wake-up: they take the rule out of
`rule_next` atomically, so a running dispatcher fires none of its slots after the call (tested
below with a witness rule). The `unlease` script wakes a dispatcher for a catch-up replay
waiting for the lease.

Nothing here sleeps or bounds a time: each test awaits the dispatcher's passes (tests/passes.py)
with its polls an hour long, so a pass that follows an operation can only come from the
wake-up the operation published (a missing PUBLISH hangs the test until pytest-timeout), and
`Dispatcher.wakeups` shows it heard one. How fast it acts is measured in bench/wake.py
(BENCHMARKS.md, "Rule operations wake the dispatcher")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.passes import HOUR_MS, Passes


def _dispatched(real: Any, app: Any) -> int:
    return int(real.sync.hget(app.keys.stats, "dispatched") or 0)


def _create(app: Any) -> None:
    app.schedule("r", "t", every=1, misfire="skip")


def _edit(app: Any) -> None:
    app.schedule("r", "t", every=1, misfire="skip")


def _resume(app: Any) -> None:
    assert app.resume_schedule("r")


def _backfill(app: Any) -> None:
    now = datetime.now(UTC)
    app.backfill("r", now - timedelta(days=3), now)


def _sync(app: Any) -> None:
    app.declare("r", "t", every=1, misfire="skip")
    app.sync_schedules()


def _before(op: str, app: Any) -> None:
    if op == "edit":  # a rule whose next fire is a year away
        app.schedule("r", "t", cron="0 0 1 1 *", tz="UTC")
    elif op == "resume":
        app.schedule("r", "t", every=1, misfire="skip", paused=True)
    elif op == "backfill":
        app.schedule("r", "t", cron="0 0 * * *", tz="UTC")


OPS = {"create": _create, "edit": _edit, "resume": _resume, "backfill": _backfill,
       "sync": _sync}  # fmt: skip


@pytest.mark.parametrize("op", sorted(OPS))
async def test_a_rule_operation_wakes_a_sleeping_dispatcher(real: Any, queue: str, op: str) -> None:
    """Asleep for an hour after its first pass, the dispatcher passes again once the operation
    is written, because it heard the wake-up: that pass learns the rule's new next fire (or
    dispatches the backfilled runs), and the slot it learned is the one that then fires."""
    app = real.app(queue)
    _before(op, app)
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=HOUR_MS)
    passes = Passes(d)
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        first = await passes.next()  # nothing due: the next pass is an hour away
        assert first.moved == 0 and d.wakeups == 0
        await asyncio.to_thread(OPS[op], app)
        woken = await passes.next()
        assert woken.wakeups >= 1  # a wake-up, not the hour-long poll, brought this pass
        if op == "backfill":
            assert woken.moved >= 1  # the backfilled runs went straight onto the stream
            return
        assert woken.next_due_ms is not None and woken.next_due_ms != first.next_due_ms
        await passes.until(lambda: _dispatched(real, app) >= 1)  # on the timer it set
        ran = [h["slot_ms"] for h in app.schedule_history("r") if h["outcome"] == "ran"]
        assert ran == [woken.next_due_ms]
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()


async def test_the_issues_case_a_firing_rule_paused_two_slots_and_resumed_fires_after_it(
    real: Any, queue: str
) -> None:
    """The issue's case, on a FakeClock: an `every=2, misfire="skip"` rule that has been
    firing is paused for two slots (4 s) and resumed while its dispatcher sleeps; the slots
    after the resume fire (`ran`), none is recorded `skipped: grace_passed`, and the two in
    the pause are `skipped: paused`. Before the fix the resume did not wake the dispatcher,
    and the slots after it were skipped until its 30 s poll."""
    from tests.integration.rules.test_schedules import T0
    from zsched import FakeClock

    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    app.schedule("r", "t", every=2, misfire="skip")
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=HOUR_MS)
    for at in (0, 2000, 4000):  # firing: three slots on time
        clock.set(T0 + at)
        await d.tick()
    clock.set(T0 + 4500)
    assert app.pause_schedule("r")
    passes = Passes(d)
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        await passes.next()  # paused: nothing due, asleep for an hour
        clock.set(T0 + 8500)  # two slots (6 s, 8 s) passed in the pause
        await asyncio.to_thread(app.resume_schedule, "r")
        woken = await passes.next()
        assert woken.wakeups >= 1 and woken.next_due_ms == T0 + 10_000
        for at in (10_000, 12_000, 14_000):  # each slot after the resume, as it comes due
            clock.set(T0 + at + 5)
            await passes.until(lambda at=at: _outcome(app, T0 + at) is not None)
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()
    got = {h["slot_ms"] - T0: (h["outcome"], h["reason"]) for h in app.schedule_history("r")}
    assert got == {
        0: ("ran", ""), 2000: ("ran", ""), 4000: ("ran", ""),
        6000: ("skipped", "paused"), 8000: ("skipped", "paused"),
        10_000: ("ran", ""), 12_000: ("ran", ""), 14_000: ("ran", ""),
    }  # fmt: skip


def _outcome(app: Any, slot_ms: int) -> str | None:
    for h in app.schedule_history("r"):
        if h["slot_ms"] == slot_ms:
            return str(h["outcome"])
    return None


def _ready_slots(real: Any, app: Any, sid: str) -> list[int]:
    """The slots (ms) of `sid`'s fires on the ready stream (nobody reads it in these tests)."""
    slots = []
    for _, f in real.sync.xrange(app.keys.ready):
        rid = f[b"run_id"].decode()
        if rid.startswith(f"{sid}@"):
            slots.append(int(datetime.fromisoformat(rid.split("@", 1)[1]).timestamp() * 1000))
    return slots


def _server_ms(real: Any) -> int:
    s, us = real.sync.time()
    return int(s) * 1000 + int(us) // 1000


@pytest.mark.parametrize("op", ["pause", "remove"])
async def test_a_running_dispatcher_stops_firing_a_paused_or_removed_rule_at_once(
    real: Any, queue: str, op: str
) -> None:
    """Pause and remove publish nothing: they take the rule out of `rule_next`, so a running
    dispatcher, whatever it learned before, fires none of the rule's slots after the call
    returns. A second rule with the same every=1 slots is the witness: its fires show that
    the dispatcher went on passing over the first rule's slots."""
    app = real.app(queue)
    app.schedule("r", "t", every=1, misfire="skip")
    app.schedule("witness", "t", every=1, misfire="skip")
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=HOUR_MS)
    passes = Passes(d)
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        await passes.until(lambda: len(_ready_slots(real, app, "r")) >= 2)
        done = app.pause_schedule if op == "pause" else app.unschedule
        assert await asyncio.to_thread(done, "r")
        after = _server_ms(real)  # no slot later than this may fire
        await passes.until(
            lambda: any(s >= after + 3000 for s in _ready_slots(real, app, "witness"))
        )
        assert [s for s in _ready_slots(real, app, "r") if s > after] == []
        if op == "pause":  # still paused, nothing recorded as fired after the pause
            assert all(h["slot_ms"] <= after for h in app.schedule_history("r")
                       if h["outcome"] == "ran")  # fmt: skip
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_unlease_wakes_a_dispatcher_for_a_waiting_catch_up_replay(
    real: Any, queue: str, overlap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an outage, the replays of a catch_up rule wait for the run holding the lease;
    when it ends, `unlease` publishes on `wake` and a sleeping dispatcher starts the next
    replay. The dispatcher's own polls (the catch-up retry, the rules recheck and the idle
    poll) are made an hour long here, so only the wake can start the replays: with the
    PUBLISH taken out of unlease.lua the test hangs."""
    import zsched.dispatch.firer as firer
    from tests.integration.rules.test_schedules import T0, H
    from zsched import FakeClock
    from zsched.rules.triggers import slot_run_id

    monkeypatch.setattr(firer, "CATCH_UP_BLOCKED_MS", H)
    monkeypatch.setattr(firer, "RULES_RECHECK_S", H / 1000)
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    ran: list[str] = []

    @app.task(name="report")
    def report(payload: Any) -> None:
        import zsched

        ran.append(zsched.current_run().run_id)

    app.schedule("r", "report", every=3600, misfire="catch_up", max_catch_up=3, overlap=overlap)
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=H)
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    assert ran == [slot_run_id("r", T0)]
    clock.set(T0 + 10 * H + 5)  # the dispatchers were down for 9 slots
    await d.tick()  # 10 H fires on time and holds the lease; the replays wait for it
    clock.set(T0 + 10 * H + 30)  # after the catch-up's short pause (20 ms)
    await d.tick()  # the replays are blocked: the next try would be CATCH_UP_BLOCKED_MS on
    assert d.parts[0].blocked == 1  # type: ignore[attr-defined]
    d.parts[0].invalidate()
    passes = Passes(d)
    stop = asyncio.Event()
    loop = asyncio.create_task(d.run(stop))
    try:
        firer_ = d.parts[0]
        for n in (3, 4, 5):
            # Asleep for an hour: it has read that the replays wait for the lease (also after
            # the wake-up of its own last fire, whose read is then such a pass).
            await passes.until(lambda: firer_.blocked == 1)  # type: ignore[attr-defined]
            before = d.wakeups
            assert await w.tick() == 1  # the run holding the lease ends: unlease publishes
            fired = await passes.until(lambda n=n: _dispatched(real, app) >= n)
            assert fired.wakeups > before
        assert await w.tick() == 1
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        await d.close()
        await w.close()
    assert ran == [slot_run_id("r", T0 + i * H) for i in (0, 10, 7, 8, 9)]
