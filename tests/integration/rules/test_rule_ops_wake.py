"""Every rule operation wakes a sleeping dispatcher (issue 18, defect 1): create, edit, resume,
backfill and declared sync make the rule's next fire (or run) happen without waiting for the
dispatcher's idle poll (max_idle_ms, 30 s by default). Pause and remove need no wake-up: they
take the rule out of `rule_next` atomically, so no dispatcher can fire it afterwards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

#: Far below the dispatcher's 30 s idle poll: a fire that waits for the poll fails the test.
WITHIN_S = 10.0


async def _wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WITHIN_S
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
