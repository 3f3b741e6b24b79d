"""Jitter never reorders a rule's fires, also where a DST change shortens the gap between two
slots (review of issue 18, F1): a fire's delay ends before the rule's next slot."""

from __future__ import annotations

import pytest

from zsched.rules.plan import jitter_ms, plan
from zsched.rules.spec import State, build_spec

H = 3_600_000
D = 24 * H

# (rule options, an instant a day or so before the DST change that shortens a gap)
SHORTENED = {
    # Berlin falls back 2026-10-25T01:00Z: 02:30 wall time is 00:30Z and 01:30Z, 1 h apart.
    "berlin-repeat-both": (
        dict(cron="30 2 * * *", tz="Europe/Berlin", dst_repeat="both", jitter=6 * 3600),
        1_792_800_000_000,
    ),
    # Berlin springs forward 2026-03-29T01:00Z: 01:00 and 03:00 wall time are 1 h apart.
    "berlin-spring-two-a-day": (
        dict(cron="0 1,3 * * *", tz="Europe/Berlin", jitter=2 * 3600),
        1_774_656_000_000,
    ),
    # Lord Howe falls back 30 minutes on 2026-04-04T15:00Z (02:00 wall back to 01:30).
    "lord-howe-repeat-both": (
        dict(cron="45 1 * * *", tz="Australia/Lord_Howe", dst_repeat="both", jitter=12 * 3600),
        1_775_174_400_000,
    ),
}


def _slots(spec, t0):
    return spec.trigger.slots_between(t0, t0 + 3 * D, 100)


@pytest.mark.parametrize("case", sorted(SHORTENED))
def test_a_jitter_is_cut_before_the_next_slot_where_dst_shortens_a_gap(case) -> None:
    opts, t0 = SHORTENED[case]
    s = build_spec("report", "t", **opts)  # accepted: the normal period is longer
    slots = _slots(s, t0)
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    assert min(gaps) < s.jitter_ms < max(gaps)  # a gap this jitter could reorder
    fires = [s_ + jitter_ms(s, s_) for s_ in slots]
    assert all(f < nxt for f, nxt in zip(fires, slots[1:], strict=False))
    assert fires == sorted(fires)
    # Each on-time fire made by the planner carries that due time.
    for slot in slots:
        ((got_slot, due, _),) = plan(s, State(), slot, slot, 100).fires
        assert (got_slot, due) == (slot, slot + jitter_ms(s, slot))


def test_the_reviewers_case_fires_the_two_fall_back_slots_in_order() -> None:
    s = build_spec("report", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_repeat="both",
                   jitter=6 * 3600)  # fmt: skip
    first, second = 1_792_888_200_000, 1_792_891_800_000  # 2026-10-25 00:30Z and 01:30Z
    assert s.trigger.next_after_ms(first) == second
    # Uncut, the 00:30Z slot's spread (5 h 17 min) would fire it after the 01:30Z one.
    assert first + jitter_ms(s, first) < second <= second + jitter_ms(s, second)


def test_a_coalesced_late_run_is_due_before_the_next_slot() -> None:
    s = build_spec("report", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_repeat="both",
                   jitter=6 * 3600, misfire="coalesce")  # fmt: skip
    first, second = 1_792_888_200_000, 1_792_891_800_000
    now = first + 40 * 60_000  # 40 min late, 20 min before the next slot
    p = plan(s, State(), first, now, 100)
    ((slot, due, outcome),) = p.fires
    assert (slot, outcome) == (first, "ran_late") and now <= due < second
