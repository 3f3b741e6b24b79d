"""Where croniter 7 departs from cron and docs/policies.md, and zsched reads the fields as the
doc says (zsched/rules/cronfields.py). Each case was a disagreement found by the reference
model's own slot enumerator (tests/model/test_slots_vs_triggers.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from zsched.rules.cronfields import for_croniter
from zsched.rules.triggers import Cron


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def _days(expr: str, frm: str, count: int) -> list[str]:
    slots = Cron(expr, "UTC").slots_between(_ms(frm) - 1, 2**53, count)
    return [datetime.fromtimestamp(s / 1000, UTC).strftime("%Y-%m-%d %H:%M") for s in slots]


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        # An equal range is its one value (croniter 7: the whole field, every minute).
        ("5-5 * 4-4 * *", ["2026-01-04 00:05", "2026-01-04 01:05", "2026-01-04 02:05"]),
        # ... also when one bound is a name: 6-JUN is June, 4-THU is Thursday.
        ("0 0 1 6-JUN *", ["2026-06-01 00:00", "2027-06-01 00:00", "2028-06-01 00:00"]),
        ("0 0 * 1 4-THU", ["2026-01-01 00:00", "2026-01-08 00:00", "2026-01-15 00:00"]),
        # ... and with a step: 10-10/5 is minute 10.
        ("10-10/5 0 * * *", ["2026-01-01 00:10", "2026-01-02 00:10", "2026-01-03 00:10"]),
    ],
)
def test_an_equal_range_is_one_value(expr: str, want: list[str]) -> None:
    assert _days(expr, "2026-01-01T00:00", 3) == want


def test_a_day_field_listing_every_day_is_restricted_so_every_day_fires() -> None:
    # Both day fields restricted: a day matching either fires; `*/1` matches every day.
    # croniter 7 took `*/1` for `*` because the other field holds a `*`, and fired on odd
    # days (dom */2) or on Sundays, Tuesdays, ... (dow */2) only.
    every_day = ["2026-01-01 00:00", "2026-01-02 00:00", "2026-01-03 00:00", "2026-01-04 00:00"]
    assert _days("0 0 */2 * */1", "2026-01-01T00:00", 4) == every_day
    assert _days("0 0 */1 * */2", "2026-01-01T00:00", 4) == every_day
    assert _days("0 0 1-31 * */3", "2026-01-01T00:00", 4) == every_day


def test_other_fields_are_left_as_written() -> None:
    fields = ("*/15", "9-17", "*/2", "jan-mar", "1-5")
    assert for_croniter(fields) == fields
    assert for_croniter(("0", "0", "*", "*", "*/1")) == ("0", "0", "*", "*", "*/1")
