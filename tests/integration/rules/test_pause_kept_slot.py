"""docs/policies.md, an edit during an outage: the stored next fire already due is kept (it
fires under the new definition). A pause before any dispatcher handled it records it
`skipped: paused` like any slot due and not fired when the rule was paused (the resume lists
only the current trigger's slots, so it had no outcome: found by tests/model/completeness.py).
"""

from __future__ import annotations

from typing import Any

from tests.integration.rules.test_schedules import T0, M, one_outcome_per_slot
from zsched import FakeClock


def _rule(real: Any, queue: str) -> tuple[Any, FakeClock, Any]:
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)

    @app.task(name="t")
    def t(payload: Any) -> None:
        pass

    app.schedule("r", "t", every=60, misfire="skip")
    return app, clock, app.dispatcher(redis=real.async_client())


def _outcomes(app: Any) -> list[tuple[int, str, str]]:
    return [((r.slot_ms - T0) // 1000, r.outcome, r.reason) for r in one_outcome_per_slot(app, "r")]


async def test_a_slot_kept_by_an_edit_during_an_outage_then_paused_is_skipped_paused(
    real: Any, queue: str
) -> None:
    """Every dispatcher down after T0; at 4.5 min every=60 becomes every=90 (slot 1 min, due,
    is kept), then the rule is paused and resumed at 8.5 min: 1 min is `skipped: paused`, then
    the 90 s slots after it, and the audit finds every slot accounted for."""
    app, clock, d = _rule(real, queue)
    await d.tick()
    clock.set(T0 + 4 * M + 30_000)
    app.schedule("r", "t", every=90, misfire="skip")
    assert app.pause_schedule("r", note="deploy")
    assert _outcomes(app) == [(0, "ran", ""), (60, "skipped", "paused: deploy")]
    clock.set(T0 + 8 * M + 30_000)
    assert app.resume_schedule("r")
    await d.tick()
    paused = [(s, "skipped", "paused: deploy") for s in (60, 90, 180, 270, 360, 450)]
    assert _outcomes(app) == [(0, "ran", ""), *paused]
    clock.set(T0 + 12 * M)
    await d.tick()
    assert [r.unaccounted for r in app.audit_schedules()] == [[]]
    await d.close()


async def test_a_kept_slot_paused_then_edited_while_paused_keeps_its_outcome(
    real: Any, queue: str
) -> None:
    """The same pause, then the paused rule's trigger is edited again (which records the
    90 s slots of the pause so far): slot 1 min still has its one outcome, and the audit,
    which checks each trigger's slots over its span, finds none missing."""
    app, clock, d = _rule(real, queue)
    await d.tick()
    clock.set(T0 + 4 * M + 30_000)
    app.schedule("r", "t", every=90, misfire="skip")
    assert app.pause_schedule("r")
    clock.set(T0 + 6 * M + 30_000)
    app.schedule("r", "t", every=120, misfire="skip")
    clock.set(T0 + 9 * M)
    assert app.resume_schedule("r")
    await d.tick()
    old = [(s, "skipped", "paused") for s in (60, 90, 180, 270, 360)]
    assert _outcomes(app) == [(0, "ran", ""), *old, (480, "skipped", "paused")]
    clock.set(T0 + 14 * M)
    await d.tick()
    assert [r.unaccounted for r in app.audit_schedules()] == [[]]
    await d.close()
