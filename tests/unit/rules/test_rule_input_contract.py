"""Smaller contract holes of rules and run input (issue 18, defect 8), each refused or made
consistent with a clear error naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from zsched.errors import InvalidArgument, RuleError
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


BEFORE_1970 = datetime(1969, 12, 31, 23, 59, tzinfo=UTC)


@pytest.mark.parametrize("field", ["start_at", "end_at"])
@pytest.mark.parametrize("value", [BEFORE_1970, -60.0])
def test_a_rules_start_at_or_end_at_before_1970_is_refused_naming_the_field(
    backend, queue, field, value
) -> None:
    """Accepted before: start_at before 1970 reached the scripts as a negative instant, and an
    end_at in 1969 made a rule that never fires, silently."""
    app = backend.app(queue)
    with pytest.raises(InvalidArgument, match=f"^{field} .*1970") as e:
        app.schedule("r", "t", every=60, **{field: value})
    assert e.value.field == field
    assert app.schedules() == []


@pytest.mark.parametrize("value", [BEFORE_1970, -60.0, -1e15, 1e14])
def test_an_every_triggers_own_start_at_outside_1970_to_9999_is_refused_naming_it(
    backend, queue, value
) -> None:
    """Accepted before (issue 18's review): `Every(60, start_at=-1e15)` was stored, and then
    every read of the queue's rules raised OverflowError and every dispatcher pass logged
    'ledger audit failed'."""
    with pytest.raises(RuleError, match=r"^start_at .*(before 1970|after the year 9999)") as e:
        Every(60, start_at=value)
    assert e.value.field == "start_at"
    with pytest.raises(RuleError, match=r"^start_at .* ms is before 1970"):
        Every.from_ms(60_000, -(10**15))
    app = backend.app(queue)
    app.schedule("ok", "t", every=Every(60, start_at=0))  # 1970 itself is fine
    assert [s.schedule_id for s in app.schedules()] == ["ok"]


def test_an_end_at_before_the_start_at_is_refused(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(InvalidArgument, match="end_at is before start_at") as e:
        app.schedule("r", "t", every=60, start_at=2_000_000_000, end_at=1_999_999_999)
    assert e.value.field == "end_at"


def test_app_enqueue_refuses_a_run_at_before_1970_naming_the_field(backend, queue) -> None:
    app = backend.app(queue)
    for value in (BEFORE_1970, -1.0):
        with pytest.raises(InvalidArgument, match="^run_at") as e:
            app.enqueue("t", {}, run_at=value)
        assert e.value.field == "run_at"
    assert app.enqueue("t", {}, run_at=datetime(1970, 1, 1, tzinfo=UTC))  # 1970 itself is fine


@pytest.mark.parametrize("field", ["start", "end"])
@pytest.mark.parametrize("value", [BEFORE_1970, -60.0])
def test_a_backfill_start_or_end_before_1970_is_refused_naming_the_field(
    backend, queue, field, value
) -> None:
    """A ValueError naming the field (RuleError is an InvalidArgument), before any script
    runs: nothing is backfilled, nothing reaches Redis as an error reply."""
    app = backend.app(queue)
    app.schedule("r", "t", cron="0 0 * * *", tz="UTC")
    window = {"start": datetime(1970, 1, 1, tzinfo=UTC), "end": datetime(1970, 1, 3, tzinfo=UTC)}
    with pytest.raises(ValueError, match=f"^{field} .*1970") as e:
        app.backfill("r", **{**window, field: value})
    assert isinstance(e.value, InvalidArgument) and e.value.field == field
    assert app.status().delayed == 0


@pytest.mark.parametrize("value", [BEFORE_1970, -1.0])
def test_a_reschedule_to_a_run_at_before_1970_is_refused_naming_the_field(
    backend, queue, value
) -> None:
    app = backend.app(queue)
    rid = app.enqueue("t", {}, delay=60)
    due = app.get_run(rid)
    with pytest.raises(ValueError, match="^run_at") as e:
        app.reschedule(rid, run_at=value)
    assert isinstance(e.value, InvalidArgument) and e.value.field == "run_at"
    assert app.get_run(rid) == due  # unchanged
