"""Found by a review of recurring rules (pure functions): each test failed before its fix,
where the code differed from docs/policies.md."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from zsched.errors import RuleError
from zsched.rules import dst
from zsched.rules.plan import plan
from zsched.rules.spec import State, build_spec
from zsched.rules.triggers import slot_run_id

M = 60_000
T0 = 1_800_000_000_000 // M * M


def utc(*a: int) -> int:
    return dst.to_ms(datetime(*a, tzinfo=UTC))


def test_dst_gap_record_when_the_offsets_around_the_check_window_agree() -> None:
    # "30 2 8 3 *" in New York with dst_gap="skip": 2026-03-08 is the spring-forward day, so
    # 02:30 does not exist. Its fires around it are 2025-03-08 and 2027-03-08, both EST, so
    # dst_gap_skips' "offset(lo) == offset(now)" shortcut sees no transition at all.
    # policies.md: the rule "gets `skipped: dst_gap` at the instant the gap ended".
    s = build_spec("y", "t", cron="30 2 8 3 *", tz="America/New_York", dst_gap="skip")
    prev, nxt = utc(2025, 3, 8, 7, 30), utc(2027, 3, 8, 7, 30)
    assert s.trigger.next_after_ms(prev) == nxt
    state = State(created_ms=prev - M, gap_checked_ms=prev, last_slot_ms=prev)
    p = plan(s, state, nxt, nxt + 5, budget=100)
    gap_end = utc(2026, 3, 8, 7)
    assert (gap_end, "skipped", "dst_gap", slot_run_id("y", gap_end), gap_end) in p.records


def test_dst_gap_record_after_an_outage_spanning_both_transitions() -> None:
    # Same shortcut: a daily Berlin rule, dispatchers down 2026-01-02 .. 2026-12-01 (both
    # CET). The 2026-03-29 gap slot gets no outcome at all.
    s = build_spec("d", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip",
                   misfire="skip")  # fmt: skip
    first = utc(2026, 1, 2, 1, 30)
    state = State(created_ms=first - M, gap_checked_ms=first - 1)
    now = utc(2026, 12, 1, 1, 30)
    p = plan(s, state, first, now, budget=100)
    assert p.new_next is not None and p.new_next > now  # one pass covers the outage
    assert utc(2026, 3, 29, 1) in {r[0] for r in p.records if r[2] == "dst_gap"}


def test_coalesce_runs_once_for_an_outage_longer_than_one_pass() -> None:
    # policies.md: coalesce — "one run stands for all missed slots (the newest; or the
    # on-time fire, if one is due too)". With > 1000 missed slots every 1000-slot pass fires
    # its own ran_late run: here 3 runs instead of 1.
    s = build_spec("c", "t", every=60, misfire="coalesce")
    now = T0 + 2500 * M + 5
    state, nxt, fires = State(created_ms=T0 - M), T0, []
    for _ in range(5):
        if nxt is None or nxt > now:
            break
        p = plan(s, state, nxt, now, budget=100)
        fires += p.fires
        state, nxt = p.state, p.new_next
    assert [(slot, outcome) for slot, _, outcome in fires] == [(T0 + 2500 * M, "ran")]


@pytest.mark.parametrize(
    "options",
    [
        {"every": 60, "misfire_grace": 1e30},  # OverflowError in Spec.encode
        {"every": 60, "jitter": 1e30},  # OverflowError in Spec.encode
        {"cron": "0 * * * *", "tz": "UTC", "start_at": 1e12},  # year 33658: next_after fails
    ],
)
def test_build_spec_refuses_values_it_cannot_store_or_compute(options) -> None:
    # policies.md: "A rule is validated when built"; build_spec's contract is "RuleError names
    # the bad part". These pass build_spec (and app.declare) and then crash with
    # OverflowError in upsert — for a declared rule, at every dispatcher start.
    with pytest.raises(RuleError):
        s = build_spec("v", "t", **options)
        s.encode()
        s.first_slot_after(T0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "0 2 * * *", "tz": "localtime"}, "not an IANA zone name"),
        ({"cron": "0 2 * * *", "tz": "right/Europe/Berlin"}, "not an IANA zone name"),
        ({"cron": "0 2 * * *", "tz": "posix/Europe/Berlin"}, "not an IANA zone name"),
        ({"every": 60, "max_catch_up": True}, "max_catch_up must be 0..1000"),
        ({"every": 60, "lease": 0}, "lease must be at least 1 second"),
    ],
)
def test_rule_options_that_replicas_could_read_differently_are_refused(options, message) -> None:
    """A machine's own zone file, leap-second zones, a bool for a count and a zero lease were
    accepted (the lease silently became the default)."""
    with pytest.raises(RuleError, match=message):
        build_spec("r", "t", **options)
