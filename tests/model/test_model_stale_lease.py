"""The reference model agrees with tests/integration/rules/test_paused_rule_stale_lease.py: a
lease naming a run that no longer lives (ended without freeing it: an older client's cancel or
dead letter, a reclaim's dead letter) blocks no fire after a pause (docs/policies.md, overlap:
"the next `fire` sees it is stale and frees it"; the resume is such a fire call)."""

from __future__ import annotations

from tests.model.rule_model import Fate, Model, RuleDef, manual_run_id, run_id
from zsched.rules.triggers import Every

M = 60_000
T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000


def _model(overlap: str) -> Model:
    m = Model(RuleDef("r", Every(600), overlap=overlap), lambda r, a: Fate(60 * M), now=T0)
    m.create()
    return m


def _lose(m: Model, rid: str) -> None:
    """The run ends without its lease being freed (no _unlease): the lease is stale."""
    m.runs[rid].state = "dead"
    assert m.lease == rid


def test_the_models_first_slot_after_a_resume_fires_despite_a_stale_lease() -> None:
    m = _model("skip")  # its slot T0 fires at the creation and holds the lease
    m.pause()
    _lose(m, run_id("r", T0))
    m.advance_to(T0 + 25 * M)
    m.resume()
    m.advance_to(T0 + 30 * M)
    assert m.outcomes()[T0 + 30 * M] == [("ran", "")]
    assert m.lease == run_id("r", T0 + 30 * M)


def test_the_models_manual_fire_of_a_paused_rule_is_not_skipped_for_a_stale_lease() -> None:
    m = _model("skip")
    m.pause()
    _lose(m, run_id("r", T0))
    m.advance_to(T0 + 5 * M)
    m.run_now()
    assert m.lease == manual_run_id("r", T0 + 5 * M)
