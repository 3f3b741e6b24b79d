"""Smaller contract holes of rules and run input (issue 18, defect 8), each refused or made
consistent with a clear error naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from zsched.errors import RuleError
from zsched.rules.spec import build_spec
from zsched.rules.triggers import Every
from zsched.runs.runinput import to_ms


@pytest.mark.parametrize("trigger", [{"every": 60}, {"cron": "*/1 * * * *", "tz": "UTC"}])
def test_a_jitter_longer_than_the_rules_period_is_refused(trigger) -> None:
    with pytest.raises(RuleError, match=r"schedule s: jitter 61s is longer than .*60s"):
        build_spec("s", "t", jitter=61, **trigger)
    assert build_spec("s", "t", jitter=60, **trigger).jitter_ms == 60_000


def test_a_jitter_is_judged_against_the_shortest_gap_of_a_cron_rule() -> None:
    # 09:00 and 17:00: gaps of 8 h and 16 h; a 9 h jitter could put 09:00's fire after 17:00.
    with pytest.raises(RuleError, match="jitter"):
        build_spec("s", "t", cron="0 9,17 * * *", tz="UTC", jitter=timedelta(hours=9))


def test_start_at_is_epoch_seconds_in_every_api() -> None:
    at = datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
    secs = at.timestamp()
    assert Every(600, start_at=secs) == Every(600, start_at=at)
    assert Every(600, start_at=int(secs)).start_ms == int(secs) * 1000
    spec = build_spec("s", "t", every=600, start_at=secs)
    assert spec.trigger == Every(600, start_at=at)
    assert spec.start_ms == int(secs * 1000)
    assert Every.from_ms(600_000, int(secs * 1000)) == Every(600, start_at=at)


def test_a_run_at_before_1970_is_a_value_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"run_at 1969-12-31T23:59:59\+00:00 is before 1970"):
        to_ms(datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC))
    with pytest.raises(ValueError, match="run_at"):
        to_ms(-1.0)
    assert to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
