"""The completeness check (tests/model/completeness.py) on the model alone, no Redis: the
operations the state machine makes leave no due slot without exactly one outcome, and the
check fails on a ledger that lacks an outcome, has two, records a paused slot otherwise, has
one for an instant that is no slot, keeps one after a removal or misses a dst_gap record."""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.completeness import DueSlots
from tests.model.rule_model import Fate, Model, RuleDef
from tests.model.slots import CronSpec, EverySpec

M = 60_000
T0 = 1_800_000_000_000
EVERY = EverySpec(M)
RUN = Fate(30_000)  # every run 30 s, ok


class Driver:
    """The model and the check, fed the same operations as harness.Pair feeds them."""

    def __init__(self, rule: RuleDef, start: int = T0 - 1, paused: bool = False) -> None:
        self.model = Model(rule, lambda rid, attempt: RUN, now=start)
        self.model.create(paused)
        self.due = DueSlots(rule.trigger, start, paused)

    def do(self, op: str, *args: Any) -> None:
        getattr(self.model, op)(*args)
        if op != "advance_to":
            self.due.on(op, self.model.now, *args)

    def edit(self, **changes: Any) -> None:
        self.model.edit(**changes)
        self.due.edit(self.model.now, self.model.rule.trigger)

    def at(self, k: float) -> None:
        self.do("advance_to", T0 + int(k * M))

    def problems(self) -> list[str]:
        m = self.model
        return self.due.problems(m.ledger, m.backlog, m.now, caught_up=m.up)


def outage(misfire: str, overlap: str, slots: int, cap: int = 3) -> Driver:
    d = Driver(RuleDef("r", EVERY, misfire=misfire, overlap=overlap, max_catch_up=cap))
    d.at(0.5)
    d.do("set_up", False)
    d.at(slots + 0.5)
    assert d.problems() == []  # slots up to the outage handled; the missed ones not due yet
    d.do("set_up", True)
    assert d.problems() == []
    d.at(slots + 30)
    return d


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
def test_an_outage_leaves_each_due_slot_one_outcome(misfire: str, overlap: str) -> None:
    d = outage(misfire, overlap, 20)
    assert d.problems() == []
    assert len(d.due.expected(d.model.now, True)) == 51  # slots 0..50


# The model's _pass listed 1,000 slots of an outage and dropped the rest (review-18 section 0,
# fixed with the planner's and the simulator's: every missed slot gets one outcome).
def test_an_outage_of_more_than_1000_slots_leaves_each_due_slot_one_outcome() -> None:
    d = outage("skip", "allow", 2000)
    assert d.problems() == []


def test_an_edit_during_an_outage_keeps_the_slot_already_due() -> None:
    """The stored next fire (slot 1) is already due at the edit: it fires under the new
    definition, and the 90 s trigger's slots go on after it; the 60 s slots after it are not
    the rule's."""
    d = Driver(RuleDef("r", EVERY, misfire="skip"))
    d.at(0.5)
    d.do("set_up", False)
    d.at(4.5)
    d.edit(trigger=EverySpec(90_000))
    d.at(6.2)
    d.do("set_up", True)
    d.at(12)
    assert d.problems() == []
    slots = sorted(d.due.expected(d.model.now, True))
    assert slots[:3] == [T0, T0 + M, T0 + 90_000]


def test_a_pause_during_an_outage_and_a_trigger_edit_while_paused() -> None:
    d = Driver(RuleDef("r", EVERY, misfire="catch_up"))
    d.at(0.5)
    d.do("set_up", False)
    d.at(3.5)
    d.do("pause")  # from the stored next fire, slot 1: slots 1..3 are paused too
    d.do("set_up", True)
    d.at(6.5)
    d.edit(trigger=EverySpec(90_000))
    d.at(9.5)
    assert d.problems() == []
    d.do("resume")
    d.at(15)
    assert d.problems() == []
    want = d.due.expected(d.model.now, True)
    assert [want[T0 + k * M] for k in (0, 1, 6)] == ["any", "paused", "paused"]
    assert want[T0 + 9 * M] == "paused"  # 90 s slot 6 (9 min), after the edit, before the resume


def test_a_rule_created_paused_has_only_paused_slots_until_its_resume() -> None:
    d = Driver(RuleDef("r", EVERY), paused=True)
    d.at(5.5)
    assert d.problems() == []
    d.model.ledger.append((T0 + 2 * M, "ran", "", "r@x"))
    assert d.problems() == [f"an outcome [('ran', '')] for {T0 + 2 * M}, not a due slot"]


def _tampered(change: str) -> list[str]:
    d = outage("catch_up", "allow", 5)
    if change == "pause":
        d.do("pause")
        d.at(40)
        d.do("resume")
        d.at(42)
    ledger = d.model.ledger
    i = next(i for i, row in enumerate(ledger) if row[0] == T0 + 3 * M)
    if change == "drop":
        del ledger[i]
    elif change == "twice":
        ledger.append(ledger[i])
    elif change == "stray":
        ledger.append((T0 + 3 * M + 1, "ran", "", "r@x"))
    elif change == "pause":
        j = next(i for i, row in enumerate(ledger) if row[1:3] == ("skipped", "paused"))
        ledger[j] = (ledger[j][0], "ran", "", ledger[j][3])
    return d.problems()


@pytest.mark.parametrize(
    ("change", "says"),
    [("drop", "has 0 outcomes"), ("twice", "has 2 outcomes"), ("stray", "not a due slot"),
     ("pause", "was paused but is recorded")],
)  # fmt: skip
def test_the_check_fails_on_a_ledger_that_is_not_complete(change: str, says: str) -> None:
    bad = _tampered(change)
    assert len(bad) == 1 and says in bad[0], bad


def test_the_check_fails_on_a_removed_rules_ledger() -> None:
    d = outage("skip", "allow", 3)
    d.do("remove")
    assert d.problems() == []
    d.model.ledger.append((T0 + 40 * M, "ran", "", "r@x"))
    assert "after the rule was removed" in d.problems()[0]


def test_a_missing_dst_gap_record_is_seen() -> None:
    """Berlin's `30 2 * * *` with dst_gap="skip" across 2026-03-29's gap: `skipped: dst_gap`
    at 01:00Z once the next day's fire has passed; without it the check fails."""
    rule = RuleDef("r", CronSpec("30 2 * * *", "Europe/Berlin", dst_gap="skip"))
    start = 1_774_656_000_000  # 2026-03-28T00:00Z
    d = Driver(rule, start=start)
    d.do("advance_to", start + 3 * 86_400_000)
    assert d.problems() == []
    gap = 1_774_746_000_000  # 2026-03-29T01:00Z
    rows = [row for row in d.model.ledger if row[1:3] == ("skipped", "dst_gap")]
    assert [row[0] for row in rows] == [gap]
    d.model.ledger.remove(rows[0])
    assert d.problems() == [f"dst_gap at {gap} recorded 0 times, not once"]
