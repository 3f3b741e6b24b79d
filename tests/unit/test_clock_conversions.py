"""The server clock's one home (zsched/clock.py): TIME replies, ms <-> datetime, now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from zsched.clock import (
    FakeClock,
    SystemClock,
    datetime_to_ms,
    ms_to_datetime,
    server_now_ms,
    time_reply_ms,
    time_reply_us,
)


@pytest.mark.parametrize("ms", [0, 1, -1, 999, -999, 1_764_600_000_123, 253_402_300_799_999,
                                -62_135_596_800_000])  # fmt: skip
def test_ms_and_datetime_convert_exactly_both_ways(ms: int) -> None:
    dt = ms_to_datetime(ms)
    assert dt.tzinfo is UTC
    assert datetime_to_ms(dt) == ms and datetime_to_ms(dt, floor=True) == ms


def test_a_datetime_between_milliseconds_rounds_to_nearest_or_down() -> None:
    base = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    ms = datetime_to_ms(base)
    assert datetime_to_ms(base + timedelta(microseconds=499)) == ms
    assert datetime_to_ms(base + timedelta(microseconds=500)) == ms + 1
    assert datetime_to_ms(base + timedelta(microseconds=999), floor=True) == ms
    # The far end of the range stays exact (a float of epoch seconds would not).
    last = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert datetime_to_ms(last) == 253_402_300_799_999


def test_a_time_reply_reads_as_epoch_ms_rounded_down() -> None:
    assert time_reply_ms((b"1764600000", b"123999")) == 1_764_600_000_123
    assert time_reply_us([1764600000, 5]) == 1_764_600_000_000_005


class _Redis:
    def __init__(self) -> None:
        self.calls = 0

    def time(self) -> tuple[bytes, bytes]:
        self.calls += 1
        return (b"1764600000", b"250000")


def test_server_now_is_the_injected_clock_else_the_servers_time() -> None:
    r = _Redis()
    assert server_now_ms(FakeClock(42), r) == 42 and r.calls == 0
    assert server_now_ms(SystemClock(), r) == 1_764_600_000_250 and r.calls == 1
