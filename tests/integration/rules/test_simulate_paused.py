"""The simulator simulates a rule as it is (docs/policies.md, "The policy simulator"): a
paused rule fires nothing over the outage, each slot `skipped: paused` with its pause's
reason, as its resume records them; `as_resumed=True` shows what its policies would do."""

from __future__ import annotations

from typing import Any

from tests.integration.rules.test_schedules import T0, M
from zsched import FakeClock
from zsched.dispatch.simulate import SLOTS_AFTER, simulate


def _rows(app: Any, **kw: Any) -> list[tuple[int, str, str]]:
    rows = simulate(app, "hb", T0, T0 + 5 * M + 5, **kw)
    return [(r.slot_ms, r.outcome, r.reason) for r in rows]


def test_a_paused_rule_simulates_as_paused_and_as_resumed_on_request(backend: Any,
                                                                    queue: str) -> None:  # fmt: skip
    app = backend.app(queue, clock=FakeClock(T0 - 30 * M))
    app.schedule("hb", "t", every=60, misfire="skip")
    resumed = [*((T0 + i * M, "skipped", "grace_passed") for i in range(5)),
               *((T0 + i * M, "ran", "") for i in range(5, 6 + SLOTS_AFTER))]  # fmt: skip
    assert _rows(app) == resumed
    assert app.pause_schedule("hb", note="db migration", by="ops")
    why = "paused by ops: db migration"
    assert _rows(app) == [(T0 + i * M, "skipped", why) for i in range(6 + SLOTS_AFTER)]
    assert _rows(app, as_resumed=True) == resumed
    # Only read: the live rule is still paused, and its ledger has nothing from the simulation.
    (info,) = app.schedules()
    assert info.paused
    assert app.schedule_history("hb") == []


def test_a_paused_rule_over_more_than_1000_slots_still_shows_every_slot(backend: Any,
                                                                       queue: str) -> None:  # fmt: skip
    # The resume writes one range entry for them (docs: the fire ledger); the simulator lists
    # each slot, as it does for a rule that is not paused.
    app = backend.app(queue, clock=FakeClock(T0 - 30 * M))
    app.schedule("hb", "t", every=1)
    app.pause_schedule("hb")
    rows = simulate(app, "hb", T0, T0 + 1_500_000)
    assert [r.slot_ms for r in rows] == list(range(T0, T0 + 1_505_001, 1000))
    assert {(r.outcome, r.reason) for r in rows} == {("skipped", "paused")}
