"""A lease left behind by a run that no longer lives does not outlast a pause (issue 18).

A rule's run can end without freeing its overlap lease: a client of a script's older form
(cancel.lua with 2 keys, dead.lua with 5, which end no lease and expect an unlease call after
them), a dead letter of a reclaim, a run lost. The rule's next fire finds the lease stale and
frees it (docs/policies.md, overlap). These tests check the same for a rule paused meanwhile:
the first fire after the resume (or after an edit of the paused rule's trigger), and a manual
fire of the paused rule, are judged against the rule's live runs, not a stale lease.
"""

from __future__ import annotations

import dataclasses

from zsched import FakeClock, ManualOutcome
from zsched.store import scripts as S

M = 60_000
T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000


def _lost(app, run_id) -> None:
    """The run ends the way an older client ends it: cancel.lua's 2-key form, no unlease."""
    call = S.cancel(app.keys, run_id)
    assert app.scripts.run(dataclasses.replace(call, keys=call.keys[:2], args=call.args[:1])) == 1


def _rule(backend, queue, overlap="skip"):
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=600, overlap=overlap)  # slots T0 + 10 min, + 20 min ...
    holder = app.run_schedule_now("r")  # holds the lease
    assert holder.outcome is ManualOutcome.STARTED
    return clock, app, holder


def _outcome(app, slot_ms):
    return [(e["outcome"], e["reason"]) for e in app.schedule_history("r", count=100)
            if e["slot_ms"] == slot_ms]  # fmt: skip


async def _fire_at(backend, app, clock, at_ms):
    clock.set(at_ms)
    d = app.dispatcher(redis=backend.async_client())
    try:
        await d.tick()
    finally:
        await d.close()


async def test_the_first_slot_after_a_resume_fires_despite_a_stale_lease(backend, queue) -> None:
    clock, app, holder = _rule(backend, queue)
    assert app.pause_schedule("r")
    _lost(app, holder.run_id)
    clock.set(T0 + 25 * M)
    assert app.resume_schedule("r")
    await _fire_at(backend, app, clock, T0 + 30 * M)
    assert _outcome(app, T0 + 30 * M) == [("ran", "")]
    assert backend.sync.get(app.keys.lease("r")) == b"r@2027-01-15T08:30:00Z"


async def test_the_first_slot_after_an_edit_of_a_paused_rule_fires_despite_a_stale_lease(
    backend, queue
) -> None:
    clock, app, holder = _rule(backend, queue)
    assert app.pause_schedule("r")
    _lost(app, holder.run_id)
    clock.set(T0 + 5 * M)
    app.schedule("r", "t", every=900, overlap="skip", paused=True)  # a new trigger, still paused
    clock.set(T0 + 25 * M)
    assert app.resume_schedule("r")
    await _fire_at(backend, app, clock, T0 + 30 * M)
    assert _outcome(app, T0 + 30 * M) == [("ran", "")]


async def test_a_fire_waiting_behind_a_stale_lease_starts_at_the_resume(backend, queue) -> None:
    clock, app, holder = _rule(backend, queue, overlap="queue")
    clock.set(T0 + 1)
    waiting = app.run_schedule_now("r")
    assert waiting.outcome is ManualOutcome.QUEUED
    assert app.pause_schedule("r")
    _lost(app, holder.run_id)
    clock.set(T0 + 5 * M)
    assert app.resume_schedule("r")
    k, r = app.keys, backend.sync
    assert r.get(k.lease("r")) == waiting.run_id.encode() and not r.hexists(k.rule_waiting, "r")
    assert app.get_run(waiting.run_id).state == "scheduled"


def test_a_manual_fire_of_a_paused_rule_is_not_skipped_for_a_stale_lease(backend, queue) -> None:
    clock, app, holder = _rule(backend, queue)
    assert app.pause_schedule("r")
    _lost(app, holder.run_id)
    clock.set(T0 + 5 * M)
    fire = app.run_schedule_now("r")
    assert fire.outcome is ManualOutcome.STARTED
    assert backend.sync.get(app.keys.lease("r")) == fire.run_id.encode()
