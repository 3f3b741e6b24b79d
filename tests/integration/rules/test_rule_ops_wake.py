"""Every rule operation wakes a sleeping dispatcher (issue 18, defect 1): create, edit, resume,
backfill and declared sync make the rule's next fire (or run) happen without waiting for the
dispatcher's idle poll (max_idle_ms, 30 s by default). Pause and remove need no wake-up: they
take the rule out of `rule_next` atomically, so a running dispatcher fires none of its slots
after the call (tested below with a witness rule). The `unlease` script wakes a dispatcher for
a catch-up replay waiting for the lease (tested with the dispatcher's polls an hour long: with
the PUBLISH taken out of unlease.lua, that test fails)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

#: Far below the dispatcher's 30 s idle poll: a fire that waits for the poll fails the test.
WITHIN_S = 10.0
#: For the tests below, whose dispatcher polls are an hour long (or which need no poll).
GENEROUS_S = 120.0


async def _wait_for(cond: Callable[[], bool], what: str, within: float = WITHIN_S) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


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
    app = real.app(queue)
    _before(op, app)
    d = app.dispatcher(redis=real.async_client())  # idle poll: 30 s
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        # Asleep: its first pass is over (nothing due) and the next is 30 s away.
        await _wait_for(lambda: not d.parts[0]._dirty, "the dispatcher's first pass")
        await asyncio.sleep(0.3)
        before = _dispatched(real, app)
        OPS[op](app)
        await _wait_for(lambda: _dispatched(real, app) > before, f"a run after {op}")
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()


async def test_resume_does_not_record_the_slots_after_it_as_missed(real: Any, queue: str) -> None:
    """The issue's case: every=1 (there: 2), misfire=skip, paused, resumed: the slots after
    the resume fire; none is recorded skipped/grace_passed because the dispatcher slept."""
    app = real.app(queue)
    app.schedule("r", "t", every=1, misfire="skip", paused=True)
    d = app.dispatcher(redis=real.async_client())
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        await asyncio.sleep(0.3)
        app.resume_schedule("r")
        await _wait_for(lambda: _dispatched(real, app) >= 2, "two fires after resume")
        outcomes = [(h["outcome"], h["reason"]) for h in app.schedule_history("r")]
        assert ("skipped", "grace_passed") not in outcomes
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()


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
    d = app.dispatcher(redis=real.async_client())
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        await _wait_for(
            lambda: len(_ready_slots(real, app, "r")) >= 2, "the rule's fires", GENEROUS_S
        )
        assert app.pause_schedule("r") if op == "pause" else app.unschedule("r")
        after = _server_ms(real)  # no slot later than this may fire
        await _wait_for(
            lambda: any(s >= after + 3000 for s in _ready_slots(real, app, "witness")),
            "three more slots of the witness",
            GENEROUS_S,
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
    replay. The dispatcher's own polls (the catch-up retry and the idle poll) are made an
    hour long here, so only the wake can start the replays within the bound."""
    import zsched.dispatch.firer as firer
    from tests.integration.rules.test_schedules import T0, H
    from zsched import FakeClock
    from zsched.rules.triggers import slot_run_id

    monkeypatch.setattr(firer, "CATCH_UP_BLOCKED_MS", H)
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
    stop = asyncio.Event()
    loop = asyncio.create_task(d.run(stop))
    try:
        # Its first pass is over (subscribed; the replays still wait): asleep for an hour.
        firer_ = d.parts[0]
        await _wait_for(lambda: not firer_._dirty, "its first pass", GENEROUS_S)  # type: ignore[attr-defined]
        for n in (3, 4, 5):  # the run holding the lease ends: unlease frees it, publishes
            assert await w.tick() == 1
            await _wait_for(lambda n=n: _dispatched(real, app) >= n, f"fire {n}", GENEROUS_S)
        assert await w.tick() == 1
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        await d.close()
        await w.close()
    assert ran == [slot_run_id("r", T0 + i * H) for i in (0, 10, 7, 8, 9)]
