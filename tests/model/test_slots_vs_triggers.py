"""The model's own slot enumerator (tests/model/slots.py, written from docs/policies.md)
against the product's triggers (zsched.rules.triggers, croniter + zsched.rules.dst): random
cron expressions in zones with transitions, random DST choices, ranges around transitions.
A disagreement is a bug in one of the two; each one found is kept below as a plain test."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.model import slots
from tests.unit.rules.test_cron_syntax import syntax_table
from zsched.errors import RuleError
from zsched.rules.triggers import Cron, Every

ZONES = [
    "Europe/Berlin",  # 1 h at 01:00Z
    "Australia/Lord_Howe",  # 30 minutes
    "America/Santiago",  # at midnight
    "America/New_York",
    "Pacific/Auckland",
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/St_Johns",  # -03:30 / -02:30
    "America/Havana",  # at midnight
    "Europe/Dublin",  # "negative DST" in tzdata (winter is the DST period)
    "Africa/Casablanca",  # Ramadan: one hour back and forth
    "Antarctica/Troll",  # a 2-hour shift
    "Asia/Gaza",
    "UTC",
]
DAY = 86_400_000
EXAMPLES = int(os.environ.get("ZSCHED_SLOTS_EXAMPLES", "150"))
PROFILE = settings(
    max_examples=EXAMPLES,
    derandomize=os.environ.get("ZSCHED_MODEL_RANDOM") != "1",
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _offset(zone: ZoneInfo, ms: int) -> timedelta | None:
    return (
        (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).astimezone(zone).utcoffset()
    )


def transitions(tz: str, year_from: int = 2025, year_to: int = 2028) -> list[int]:
    """The zone's transition instants (ms) in the years, by an hourly scan then bisection."""
    zone = ZoneInfo(tz)
    t = int(datetime(year_from, 1, 1, tzinfo=UTC).timestamp() * 1000)
    end = int(datetime(year_to, 1, 1, tzinfo=UTC).timestamp() * 1000)
    found, step = [], 3_600_000
    while t < end:
        if _offset(zone, t) != _offset(zone, t + step):
            lo, hi = t, t + step
            while hi - lo > 1000:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset(zone, mid) == _offset(zone, lo) else (lo, mid)
            found.append(hi)
        t += step
    return found


TRANSITIONS = {tz: transitions(tz) or [1_790_000_000_000] for tz in ZONES}


def _number(field: int) -> st.SearchStrategy[int]:
    lo, hi, _ = slots.BOUNDS[field]
    return st.integers(lo, hi)


@st.composite
def cron_field(draw: Any, field: int) -> str:
    """One field: `*`, a number, a range, a step, a list of those (names for month/weekday, in
    any case, also in steps; `L` in the day of month); docs/policies.md's table ("Fields")."""
    lo, hi, names = slots.BOUNDS[field]

    def value(v: int) -> str:
        if names and v < lo + len(names) and draw(st.integers(0, 4)) == 0:
            name = names[v - lo]
            return draw(st.sampled_from([name.upper(), name, name.capitalize()]))
        return str(v)

    def part() -> str:
        kinds = ["n", "n", "range", "step", "rangestep", "fromstep"] + ["L"] * (field == 3)
        kind = draw(st.sampled_from(kinds))
        if kind == "L":
            return draw(st.sampled_from(["L", "l"]))
        a = draw(st.integers(lo, hi))
        b = draw(st.integers(a, hi))
        n = draw(st.integers(1, max(1, (hi - lo) // 2)))
        return {"n": value(a), "range": f"{value(a)}-{value(b)}", "step": f"*/{n}",
                "rangestep": f"{value(a)}-{value(b)}/{n}", "fromstep": f"{value(a)}/{n}"}[kind]  # fmt: skip

    kind = draw(st.sampled_from(["*", "part", "part", "list"] + (["?"] if field in (3, 5) else [])))
    if kind in ("*", "?"):
        return kind
    if kind == "list":
        return ",".join(part() for _ in range(draw(st.integers(2, 3))))
    return part()


@st.composite
def crons(draw: Any) -> tuple[Cron, slots.CronSpec, int]:
    tz = draw(st.sampled_from(ZONES))
    fields = [draw(cron_field(i)) for i in range(1, 6)]
    if draw(st.integers(0, 5)) == 0:  # 6 fields, seconds first; sparse, to keep days small
        fields.insert(0, draw(st.sampled_from(["0", "30", "0,20,40", "*/30", "15-45/15"])))
    # Dense minute x hour fields would make a day of thousands of slots: thin them.
    if fields[-5] == "*" and draw(st.booleans()):
        fields[-5] = "*/20"
    expr = " ".join(fields)
    if draw(st.integers(0, 9)) == 0:
        expr = draw(st.sampled_from(sorted(slots.ALIASES)))
    gap = draw(st.sampled_from([None, "shift", "skip"]))
    repeat = draw(st.sampled_from([None, "first", "both"]))
    try:
        product = Cron(expr, tz, dst_gap=gap, dst_repeat=repeat)
    except RuleError:
        assume(False)
    at = draw(st.sampled_from(TRANSITIONS[tz]))
    lo = at - draw(st.integers(0, 3 * DAY))
    return product, slots.CronSpec(expr, tz, gap, repeat), lo


@given(crons(), st.integers(3_600_000, 4 * DAY), st.lists(st.integers(0, 4 * DAY), max_size=4))
@PROFILE
def test_the_enumerator_agrees_with_the_product_triggers(
    case: tuple[Cron, slots.CronSpec, int], span: int, probes: list[int]
) -> None:
    product, spec, lo = case
    gap, repeat = slots.policy(spec)
    assert (product.dst_gap, product.dst_repeat) == (gap, repeat), "the DST defaults"
    assert product.fixed_time == slots.parse(spec.expr).fixed, "fixed-time or wildcard"
    want = slots.slots_between(spec, lo, lo + span, 3000)
    assert product.slots_between(lo, lo + span, 3000) == want
    # From any instant, a repeated hour's second pass included.
    for p in probes:
        assert product.next_after_ms(lo + p) == slots.first_after(spec, lo + p), lo + p


@given(st.integers(1, 10 * DAY), st.integers(0, 2_000_000_000_000), st.integers(0, 2**41))
@PROFILE
def test_the_enumerator_agrees_with_every(interval: int, start: int, lo: int) -> None:
    product = Every.from_ms(interval, start)
    spec = slots.spec_of(product)
    assert product.slots_between(lo, lo + 20 * interval, 50) == slots.slots_between(
        spec, lo, lo + 20 * interval, 50
    )


ACCEPTED = [expr for _, examples, ok in syntax_table() if ok for expr in examples]


@pytest.mark.parametrize("tz", ["Europe/Berlin", "Australia/Lord_Howe", "America/Santiago"])
@pytest.mark.parametrize("expr", ACCEPTED)
def test_each_accepted_construct_of_the_doc_table_agrees_with_the_enumerator(
    expr: str, tz: str
) -> None:
    """docs/policies.md's cron syntax table: every example of an accepted row fires where the
    model's enumerator says, around each transition of 2026 and over a year (aliases)."""
    product, spec = Cron(expr, tz), slots.CronSpec(expr, tz)
    assert product.fixed_time == slots.parse(expr).fixed
    for at in TRANSITIONS[tz][2:4]:
        lo, hi = at - 2 * DAY, at + 2 * DAY
        assert product.slots_between(lo, hi, 3000) == slots.slots_between(spec, lo, hi, 3000)
    lo = TRANSITIONS[tz][2] - 400 * DAY
    assert product.slots_between(lo, 2**53, 15) == slots.slots_between(spec, lo, 2**53, 15)


# -- the worked examples of docs/policies.md, read by the enumerator alone -----------------


def _z(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# Each window is 24 h of UTC around the local day of the example.
@pytest.mark.parametrize(
    ("expr", "tz", "gap", "repeat", "frm", "want"),
    [
        ("30 2 * * *", "Europe/Berlin", None, None, "2026-03-28T12", ["2026-03-29T01:00:00Z"]),
        ("30 1 * * *", "America/New_York", None, None, "2026-11-01T00", ["2026-11-01T05:30:00Z"]),
        ("30 2 * * *", "Europe/Berlin", "skip", None, "2026-03-28T12", []),
        ("30 2 * * *", "Europe/Berlin", None, "both", "2026-10-24T12",
         ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]),
        ("15 2 * * *", "Australia/Lord_Howe", None, None, "2026-10-03T06", ["2026-10-03T15:30:00Z"]),
        ("45 1 * * *", "Australia/Lord_Howe", None, None, "2026-04-04T06", ["2026-04-04T14:45:00Z"]),
        ("45 1 * * *", "Australia/Lord_Howe", None, "both", "2026-04-04T06",
         ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"]),
        ("0 0 * * *", "America/Santiago", None, None, "2026-09-05T12", ["2026-09-06T04:00:00Z"]),
        ("30 23 * * *", "America/Santiago", None, None, "2026-04-04T12", ["2026-04-05T02:30:00Z"]),
        ("30 23 * * *", "America/Santiago", None, "both", "2026-04-04T12",
         ["2026-04-05T02:30:00Z", "2026-04-05T03:30:00Z"]),
    ],
)  # fmt: skip
def test_the_worked_examples(expr: str, tz: str, gap: str | None, repeat: str | None, frm: str,
                             want: list[str]) -> None:  # fmt: skip
    lo = _z(frm + ":00:00Z")
    got = slots.slots_between(slots.CronSpec(expr, tz, gap, repeat), lo, lo + DAY, 100)
    assert got == [_z(w) for w in want]


@pytest.mark.parametrize(
    ("expr", "tz", "repeat", "day", "count"),
    [
        ("*/30 * * * *", "Europe/Berlin", None, "2026-03-29", 46),
        ("*/30 * * * *", "Europe/Berlin", None, "2026-10-25", 50),
        ("*/30 * * * *", "Europe/Berlin", "first", "2026-10-25", 48),
        ("*/15 * * * *", "Australia/Lord_Howe", None, "2026-04-05", 98),
    ],
)
def test_the_worked_counts(expr: str, tz: str, repeat: str | None, day: str, count: int) -> None:
    zone = ZoneInfo(tz)
    start = datetime.fromisoformat(day).replace(tzinfo=zone)
    lo = int(start.timestamp() * 1000) - 1
    hi = int((start + timedelta(days=1)).timestamp() * 1000) - 1
    assert len(slots.slots_between(slots.CronSpec(expr, tz, None, repeat), lo, hi, 1000)) == count
