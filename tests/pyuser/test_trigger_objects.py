"""app.schedule takes zsched.Cron / zsched.Every objects and timedeltas as well as strings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import zsched
from zsched.rules.spec import build_spec


def test_cron_and_every_are_exported() -> None:
    assert "Cron" in zsched.__all__ and "Every" in zsched.__all__
    assert zsched.Cron("0 3 * * *", "Europe/Berlin").tz == "Europe/Berlin"


def test_a_cron_object_gives_the_same_spec_as_its_string_and_zone() -> None:
    a = build_spec("r", "t", cron=zsched.Cron("30 2 * * *", "America/New_York"))
    b = build_spec("r", "t", cron="30 2 * * *", tz="America/New_York")
    assert a.encode() == b.encode()


def test_an_every_object_and_a_timedelta_give_the_same_spec_as_seconds() -> None:
    by_obj = build_spec("r", "t", every=zsched.Every(minutes=10))
    by_td = build_spec("r", "t", every=timedelta(minutes=10))
    assert by_obj.encode() == by_td.encode() == build_spec("r", "t", every=600).encode()


def test_the_rules_start_at_counts_the_slots_of_an_every_object() -> None:
    start = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    a = build_spec("r", "t", every=zsched.Every(60), start_at=start)
    b = build_spec("r", "t", every=60, start_at=start)
    assert a.encode() == b.encode()
    assert a.trigger.next_after_ms(0) == int(start.timestamp() * 1000)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cron": zsched.Cron("0 3 * * *", "UTC"), "tz": "UTC"}, "belong in the Cron"),
        ({"cron": zsched.Every(60)}, "pass a Cron as cron="),
        ({"every": zsched.Cron("0 3 * * *", "UTC")}, "pass a Cron as cron="),
        (
            {"every": zsched.Every(60, start_at=5_000), "start_at": 9.0},
            "differs from the Every's start_at",
        ),
    ],
)
def test_contradicting_trigger_options_are_refused(options, says) -> None:
    with pytest.raises(zsched.RuleError, match=says):
        build_spec("r", "t", **options)


def test_app_schedule_stores_trigger_objects_like_strings(backend, queue) -> None:
    app = backend.app(queue)
    assert app.schedule("c", "t", cron=zsched.Cron("0 3 * * *", "Europe/Berlin")) == 1
    assert app.schedule("c", "t", cron="0 3 * * *", tz="Europe/Berlin") == 0  # unchanged
    assert app.schedule("e", "t", every=zsched.Every(hours=1)) == 1
    assert app.schedule("e", "t", every=timedelta(hours=1)) == 0
    assert app.schedule("e", "t", every=3600) == 0
    described = {i.schedule_id: i.rule for i in app.schedules()}
    assert described == {"c": "cron '0 3 * * *' in Europe/Berlin", "e": "every 1h"}
