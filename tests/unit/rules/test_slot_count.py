"""rules.slot_count: a trigger's number of slots in a span equals the length of its listed
slots, across DST changes (Berlin, New York, Lord Howe's 30 min, Santiago's midnight) and for
seconds fields, without listing them (a range entry's count in `stats`)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from zsched.rules.slot_count import count_between
from zsched.rules.triggers import Cron, Every

H = 3_600_000
EXPRS = ("*/15 * * * *", "10,25,40,55 * * * *", "30 2 * * *", "0 */2 * * *", "* * * * *",
         "*/7 1-3 * * *", "0 0 L * *", "30 2 * * 1-5", "15 1,2,3 * * *", "0 0 * * *",
         "*/20 * * * * *", "0 30 2 * * *", "@hourly")  # fmt: skip
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago",
         "Asia/Kathmandu")  # fmt: skip
#: Instants near 2026's transitions of those zones (and one quiet day).
NEAR = tuple(int(datetime(*d, tzinfo=UTC).timestamp() * 1000) for d in (
    (2026, 3, 29), (2026, 10, 25), (2026, 4, 5), (2026, 10, 4), (2026, 3, 8, 5),
    (2026, 11, 1, 5), (2026, 4, 5, 3), (2026, 9, 6, 3), (2026, 6, 1)))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES),
       gap=st.sampled_from([None, "shift", "skip"]), repeat=st.sampled_from([None, "first", "both"]),
       near=st.sampled_from(NEAR), before=st.integers(0, 72 * H), length=st.integers(0, 72 * H))  # fmt: skip
def test_a_cron_triggers_count_is_the_number_of_its_slots(expr, tz, gap, repeat, near, before,
                                                          length) -> None:  # fmt: skip
    cron = Cron(expr, tz, dst_gap=gap, dst_repeat=repeat)
    if expr.count(" ") == 5 and expr.startswith("*/"):
        length //= 20  # a seconds field: keep the listing short
    lo = near - before
    assert count_between(cron, lo, lo + length) == len(cron.slots_between(lo, lo + length, 10**7))


@settings(max_examples=100, deadline=None)
@given(interval=st.integers(1, 10**6), start=st.integers(0, 10**9), lo=st.integers(0, 10**9),
       length=st.integers(0, 10**8))  # fmt: skip
def test_an_every_triggers_count_is_the_number_of_its_slots(interval, start, lo, length):
    every = Every.from_ms(interval, start)
    want = len(every.slots_between(lo, lo + length, 10**9))
    assert count_between(every, lo, lo + length) == want


def test_a_year_of_a_one_second_cron_is_counted_without_listing_it() -> None:
    lo = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    hi = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp() * 1000)
    # Berlin's spring hour is missing and its autumn hour fires twice: 365 days of seconds.
    assert count_between(Cron("* * * * * *", "Europe/Berlin"), lo, hi) == 365 * 86_400
    assert count_between(Cron("0 30 2 * * *", "Europe/Berlin"), lo, hi) == 365
