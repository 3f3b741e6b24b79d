"""Cron rules across real DST transitions, checked against an independent brute-force scan.

The oracle below walks every UTC minute around each transition, reads the local clock with
zoneinfo, and decides from the cron fields and the DESIGN.md policy alone whether that
minute fires. It shares no code with zsched.rules.triggers / zsched.rules.dst and never calls croniter.
Transitions are found by scanning utcoffset changes, not hard-coded.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched.rules.triggers import Cron

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS

ZONES = (
    "America/New_York",
    "Europe/Berlin",
    "Europe/London",
    "Australia/Lord_Howe",  # 30-minute shift
    "America/Santiago",  # shifts at midnight
    "Pacific/Auckland",
)

# Expected default policy per rule. "0 1-3 * * *" and "0,30 2 * * *" are fixed-time under
# cronie's test (neither minute nor hour starts with "*").
FIXED = ("30 2 * * *", "30 1 * * *", "0 0 * * *", "30 23 * * *", "15 2 * * *", "45 1 * * *")
FIXED_LISTS = ("0 1-3 * * *", "0,30 2 * * *")
WILDCARD = ("*/15 * * * *", "0 */2 * * *", "0 * * * *")
EXPECTED_DEFAULT = {
    **{expr: ("shift", "first") for expr in FIXED + FIXED_LISTS},
    **{expr: ("skip", "both") for expr in WILDCARD},
}
OVERRIDES = (None, ("shift", "first"), ("shift", "both"), ("skip", "first"), ("skip", "both"))


def ms_of(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def offset_at(zone: ZoneInfo, ms: int) -> timedelta:
    offset = utc(ms).astimezone(zone).utcoffset()
    assert offset is not None
    return offset


@functools.cache
def transitions(name: str) -> tuple[int, ...]:
    """Every 2026–2027 instant at which `name` changes its UTC offset, to the minute."""
    zone = ZoneInfo(name)
    found = []
    ms = ms_of(datetime(2026, 1, 1, tzinfo=UTC))
    end = ms_of(datetime(2028, 1, 1, tzinfo=UTC))
    while ms < end:
        if offset_at(zone, ms) != offset_at(zone, ms + HOUR_MS):
            lo, hi = ms, ms + HOUR_MS  # offset(lo) is the old one, offset(hi) the new one
            while hi - lo > MINUTE_MS:
                mid = lo + (hi - lo) // 2 // MINUTE_MS * MINUTE_MS
                lo, hi = (mid, hi) if offset_at(zone, mid) == offset_at(zone, lo) else (lo, mid)
            found.append(hi)
        ms += HOUR_MS
    return tuple(found)


# --- the oracle -------------------------------------------------------------------------


def field_values(field: str, lo: int, hi: int) -> frozenset[int]:
    """Classic cron field syntax: *, n, a-b, lists, and /step on * or ranges."""
    values: set[int] = set()
    for part in field.split(","):
        body, _, step = part.partition("/")
        first, last = (
            (lo, hi) if body == "*" else (int(body.split("-")[0]), int(body.split("-")[-1]))
        )
        values.update(range(first, last + 1, int(step or 1)))
    return frozenset(values)


@functools.cache
def compile_expr(expr: str) -> Callable[[datetime], bool]:
    minute, hour, dom, month, dow = expr.split()
    minutes_, hours = field_values(minute, 0, 59), field_values(hour, 0, 23)
    days, months, weekdays = (
        field_values(dom, 1, 31),
        field_values(month, 1, 12),
        field_values(dow, 0, 6),
    )
    either = dom != "*" and dow != "*"  # cron's OR rule when both days are restricted

    def matches(wall: datetime) -> bool:
        if wall.minute not in minutes_ or wall.hour not in hours or wall.month not in months:
            return False
        dom_ok, dow_ok = wall.day in days, (wall.weekday() + 1) % 7 in weekdays
        return (dom_ok or dow_ok) if either else (dom_ok and dow_ok)

    return matches


@dataclass(frozen=True)
class Minute:
    ms: int
    wall: datetime  # naive local reading
    second_pass: bool  # the reading is the later occurrence of a repeated wall time
    skipped: tuple[datetime, ...]  # wall minutes the clock jumped over just before this one


@functools.cache
def minutes(name: str, lo_ms: int, hi_ms: int) -> tuple[Minute, ...]:
    zone = ZoneInfo(name)
    out = []
    previous = utc(lo_ms - MINUTE_MS).astimezone(zone).replace(tzinfo=None)
    for ms in range(lo_ms, hi_ms + 1, MINUTE_MS):
        local = utc(ms).astimezone(zone)
        wall = local.replace(tzinfo=None)
        jumped = []
        probe = previous + timedelta(minutes=1)
        while probe < wall:
            jumped.append(probe)
            probe += timedelta(minutes=1)
        out.append(Minute(ms, wall, local.fold == 1, tuple(jumped)))
        previous = wall
    return tuple(out)


def oracle(name: str, expr: str, gap: str, repeat: str, lo_ms: int, hi_ms: int) -> list[int]:
    """The DESIGN.md policy, minute by minute, on the clock as read."""
    matches = compile_expr(expr)
    fires = []
    for minute in minutes(name, lo_ms, hi_ms):
        fires_now = matches(minute.wall) and (repeat == "both" or not minute.second_pass)
        # After a gap the clock reads the first wall time past it; a shifted fire lands here.
        shifted = gap == "shift" and any(matches(w) for w in minute.skipped)
        if fires_now or shifted:
            fires.append(minute.ms)  # one entry per instant: same-instant fires merge
    return fires


def window(transition_ms: int) -> tuple[int, int]:
    return transition_ms - 26 * HOUR_MS, transition_ms + 26 * HOUR_MS


# --- the matrix ---------------------------------------------------------------------------


def test_every_zone_has_four_transitions_in_2026_and_2027() -> None:
    for name in ZONES:
        assert len(transitions(name)) == 4, name


@pytest.mark.parametrize("policy", OVERRIDES, ids=lambda p: "default" if p is None else "-".join(p))
@pytest.mark.parametrize("expr", FIXED + FIXED_LISTS + WILDCARD)
@pytest.mark.parametrize("name", ZONES)
def test_fires_around_each_transition_match_a_minute_by_minute_scan(
    name: str, expr: str, policy: tuple[str, str] | None
) -> None:
    if policy is None:
        rule = Cron(expr, name)
        gap, repeat = EXPECTED_DEFAULT[expr]
    else:
        gap, repeat = policy
        rule = Cron(expr, name, dst_gap=gap, dst_repeat=repeat)
    assert (rule.dst_gap, rule.dst_repeat) == (gap, repeat)
    for transition in transitions(name):
        lo, hi = window(transition)
        expected = oracle(name, expr, gap, repeat, lo, hi)
        assert rule.slots_between(lo - 1, hi, 10_000) == expected, utc(transition)
        assert_next_after_agrees_near(rule, expected, transition)


def assert_next_after_agrees_near(rule: Cron, expected: list[int], transition: int) -> None:
    # Start from every minute within 65 minutes of the transition (every other one 30 s
    # past the minute): both passes of any repeated hour, every reading inside a fold.
    for index in range(-65, 66):
        start = transition + index * MINUTE_MS + index % 2 * 30_000
        want = expected[bisect.bisect_right(expected, start)]
        assert rule.next_after_ms(start) == want, (utc(start), utc(want))


# --- the policy, spelled out on 2026 dates (these fail if the policy were wrong) ---------


def day_fires(rule: Cron, name: str, day: datetime) -> list[str]:
    """The fires whose local date is `day`, as UTC ISO strings."""
    zone = ZoneInfo(name)
    lo = ms_of(day.replace(tzinfo=zone)) - 6 * HOUR_MS
    hi = ms_of((day + timedelta(days=1)).replace(tzinfo=zone)) + 6 * HOUR_MS
    slots = [s for s in rule.slots_between(lo, hi, 1000) if local_date(s, zone) == day.date()]
    return [utc(s).strftime("%Y-%m-%dT%H:%MZ") for s in slots]


def local_date(ms: int, zone: ZoneInfo) -> object:
    return utc(ms).astimezone(zone).date()


def test_fixed_time_rule_in_the_spring_gap_fires_once_at_the_end_of_the_gap() -> None:
    rule = Cron("30 2 * * *", "Europe/Berlin")
    assert day_fires(rule, "Europe/Berlin", datetime(2026, 3, 29)) == ["2026-03-29T01:00Z"]


def test_fixed_time_rule_in_the_spring_gap_fires_not_at_all_with_gap_skip() -> None:
    rule = Cron("30 2 * * *", "Europe/Berlin", dst_gap="skip")
    assert day_fires(rule, "Europe/Berlin", datetime(2026, 3, 29)) == []


def test_fixed_time_rule_in_the_repeated_hour_fires_exactly_once_at_the_first_pass() -> None:
    rule = Cron("30 1 * * *", "America/New_York")
    assert day_fires(rule, "America/New_York", datetime(2026, 11, 1)) == ["2026-11-01T05:30Z"]


def test_fixed_time_rule_fires_at_both_passes_with_repeat_both() -> None:
    rule = Cron("30 1 * * *", "America/New_York", dst_repeat="both")
    assert day_fires(rule, "America/New_York", datetime(2026, 11, 1)) == [
        "2026-11-01T05:30Z",
        "2026-11-01T06:30Z",
    ]


def test_wildcard_rule_skips_the_gap_and_fires_twice_in_the_repeated_hour() -> None:
    rule = Cron("*/15 * * * *", "Europe/Berlin")
    assert len(day_fires(rule, "Europe/Berlin", datetime(2026, 3, 29))) == 23 * 4
    assert len(day_fires(rule, "Europe/Berlin", datetime(2026, 10, 25))) == 25 * 4
    hourly = Cron("0 */2 * * *", "Europe/Berlin")
    assert "2026-03-29T01:00Z" not in day_fires(hourly, "Europe/Berlin", datetime(2026, 3, 29))
    fall = day_fires(hourly, "Europe/Berlin", datetime(2026, 10, 25))
    assert fall[:3] == ["2026-10-24T22:00Z", "2026-10-25T00:00Z", "2026-10-25T01:00Z"]


BERLIN = "Europe/Berlin"


@pytest.mark.parametrize(
    ("example", "rule", "day", "around", "count"),
    [
        # 3. Wildcard rule in a gap -> skip: 01:30 CET (00:30Z), next 03:00 CEST (01:00Z).
        (3, Cron("*/30 * * * *", BERLIN), datetime(2026, 3, 29),
         ["2026-03-29T00:00Z", "2026-03-29T00:30Z", "2026-03-29T01:00Z", "2026-03-29T01:30Z"],
         46),
        # 4. Wildcard rule in a repeat -> both: 02:00 and 02:30 CEST, again CET, 03:00 CET.
        (4, Cron("*/30 * * * *", BERLIN), datetime(2026, 10, 25),
         ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z", "2026-10-25T01:30Z",
          "2026-10-25T02:00Z"], 50),
        # 7. dst_gap="shift": 02:00 and 02:30 shift to 01:00Z, the real 03:00 CEST: one fire.
        (7, Cron("*/30 * * * *", BERLIN, dst_gap="shift"), datetime(2026, 3, 29),
         ["2026-03-29T00:00Z", "2026-03-29T00:30Z", "2026-03-29T01:00Z", "2026-03-29T01:30Z"],
         46),
        # 8. dst_repeat="first": 00:00Z and 00:30Z (CEST), not 01:00Z or 01:30Z (CET).
        (8, Cron("*/30 * * * *", BERLIN, dst_repeat="first"), datetime(2026, 10, 25),
         ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T02:00Z"], 48),
    ],
)  # fmt: skip
def test_the_half_hourly_worked_examples_of_policies_md(
    example: int, rule: Cron, day: datetime, around: list[str], count: int
) -> None:
    """docs/policies.md, worked examples 3, 4, 7 and 8, as written: the fires around the
    transition (between 00:00Z and 02:00Z of that day, in order) and the day's count."""
    fires = day_fires(rule, BERLIN, day)
    window = (around[0], around[-1])
    assert [f for f in fires if window[0] <= f <= window[1]] == around, example
    assert len(fires) == count, example


def test_the_other_berlin_and_new_york_worked_examples_of_policies_md() -> None:
    """docs/policies.md, worked examples 1 (the days around Berlin's gap, and New York), 5 and
    6, as written (1's gap day itself: test_fixed_time_rule_in_the_spring_gap_...)."""
    fixed = Cron("30 2 * * *", BERLIN)
    assert day_fires(fixed, BERLIN, datetime(2026, 3, 28)) == ["2026-03-28T01:30Z"]
    assert day_fires(fixed, BERLIN, datetime(2026, 3, 30)) == ["2026-03-30T00:30Z"]
    ny = "America/New_York"
    assert day_fires(Cron("30 2 * * *", ny), ny, datetime(2026, 3, 8)) == ["2026-03-08T07:00Z"]
    skip = Cron("30 2 * * *", BERLIN, dst_gap="skip")
    after = ms_of(datetime(2026, 3, 28, 1, 30, tzinfo=UTC))
    assert utc(skip.next_after_ms(after)) == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)
    both = Cron("30 2 * * *", BERLIN, dst_repeat="both")
    assert day_fires(both, BERLIN, datetime(2026, 10, 25)) == [
        "2026-10-25T00:30Z",
        "2026-10-25T01:30Z",
    ]


def test_the_lord_howe_and_santiago_worked_examples_of_policies_md_as_written() -> None:
    """docs/policies.md, worked examples 10 and 11, every instant they give, with the default
    policies unless the example names an override (10: `45 1 * * *` without one fires once,
    at 14:45Z, the first of the two 01:45s)."""
    lh = "Australia/Lord_Howe"
    assert day_fires(Cron("15 2 * * *", lh), lh, datetime(2026, 10, 4)) == ["2026-10-03T15:30Z"]
    assert day_fires(Cron("45 1 * * *", lh), lh, datetime(2026, 4, 5)) == ["2026-04-04T14:45Z"]
    both = Cron("45 1 * * *", lh, dst_repeat="both")
    assert day_fires(both, lh, datetime(2026, 4, 5)) == ["2026-04-04T14:45Z", "2026-04-04T15:15Z"]
    quarter = day_fires(Cron("*/15 * * * *", lh), lh, datetime(2026, 4, 5))
    assert len(quarter) == 98
    assert quarter.count("2026-04-04T14:30Z") == 1 and "2026-04-04T15:00Z" in quarter
    sa = "America/Santiago"
    midnight = Cron("0 0 * * *", sa)
    assert day_fires(midnight, sa, datetime(2026, 9, 6)) == ["2026-09-06T04:00Z"]
    assert day_fires(midnight, sa, datetime(2026, 9, 5)) == ["2026-09-05T04:00Z"]
    assert day_fires(Cron("30 23 * * *", sa), sa, datetime(2026, 4, 4)) == ["2026-04-05T02:30Z"]


def test_the_interval_worked_example_of_policies_md_as_written() -> None:
    """docs/policies.md, worked example 13: `Every(hours=1)` fires at 2026-03-29T00:00Z,
    01:00Z and 02:00Z, one hour apart, while Berlin's clock reads 01:00, 03:00 and 04:00."""
    from zsched.rules.triggers import Every

    rule = Every(hours=1)
    start = ms_of(datetime(2026, 3, 28, 23, 0, tzinfo=UTC))
    slots = rule.slots_between(start, start + 3 * HOUR_MS, 10)
    assert [utc(s).strftime("%Y-%m-%dT%H:%MZ") for s in slots] == [
        "2026-03-29T00:00Z", "2026-03-29T01:00Z", "2026-03-29T02:00Z",
    ]  # fmt: skip
    berlin = ZoneInfo(BERLIN)
    assert [utc(s).astimezone(berlin).strftime("%H:%M") for s in slots] == [
        "01:00", "03:00", "04:00",
    ]  # fmt: skip


def test_fires_that_land_on_the_same_instant_are_one_fire() -> None:
    # 02:00 and 02:30 both shift to 03:00 CEST, which is also a real slot of the next rule.
    assert day_fires(
        Cron("0,30 2 * * *", "Europe/Berlin"), "Europe/Berlin", datetime(2026, 3, 29)
    ) == ["2026-03-29T01:00Z"]
    shifted = Cron("*/15 * * * *", "Europe/Berlin", dst_gap="shift")
    fires = day_fires(shifted, "Europe/Berlin", datetime(2026, 3, 29))
    assert fires.count("2026-03-29T01:00Z") == 1 and len(fires) == 23 * 4


def test_lord_howe_half_hour_shift_moves_and_repeats_only_half_an_hour() -> None:
    name = "Australia/Lord_Howe"
    gap = day_fires(Cron("15 2 * * *", name), name, datetime(2026, 10, 4))
    assert gap == ["2026-10-03T15:30Z"]  # 02:30 +11, the first instant after the gap
    both = Cron("45 1 * * *", name, dst_repeat="both")
    assert day_fires(both, name, datetime(2026, 4, 5)) == ["2026-04-04T14:45Z", "2026-04-04T15:15Z"]
    assert len(day_fires(Cron("*/15 * * * *", name), name, datetime(2026, 4, 5))) == 24 * 4 + 2


def test_santiago_midnight_gap_moves_a_midnight_rule_to_one_oclock() -> None:
    name = "America/Santiago"
    assert day_fires(Cron("0 0 * * *", name), name, datetime(2026, 9, 6)) == ["2026-09-06T04:00Z"]
    late = day_fires(Cron("30 23 * * *", name), name, datetime(2026, 4, 4))
    assert late == ["2026-04-05T02:30Z"]


def test_seconds_first_fixed_time_rule_shifts_like_a_five_field_one() -> None:
    rule = Cron("0 30 2 * * *", "Europe/Berlin")
    assert rule.fixed_time
    assert day_fires(rule, "Europe/Berlin", datetime(2026, 3, 29)) == ["2026-03-29T01:00Z"]


# --- properties -----------------------------------------------------------------------------


RULES = [Cron(expr, name) for name in ZONES for expr in ("30 1 * * *", "*/20 * * * *", "0 0 * * 0")]
RULES += [Cron("*/15 * * * *", "America/New_York", dst_gap="shift", dst_repeat="first")]


@settings(max_examples=300, deadline=None)
@given(
    rule=st.sampled_from(RULES),
    start=st.integers(
        ms_of(datetime(2020, 1, 1, tzinfo=UTC)), ms_of(datetime(2040, 1, 1, tzinfo=UTC))
    ),
    fraction=st.floats(0, 1, exclude_max=True),
)
def test_next_fire_is_the_same_from_any_start_before_it(
    rule: Cron, start: int, fraction: float
) -> None:
    fire = rule.next_after_ms(start)
    assert fire > start
    later = start + int((fire - start) * fraction)
    assert rule.next_after_ms(later) == fire
    assert rule.next_after_ms(fire) > fire
