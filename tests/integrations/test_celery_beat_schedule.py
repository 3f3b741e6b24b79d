"""from_beat_schedule on a typical Celery project's beat_schedule, and what it refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

import zsched
from zsched.errors import RuleError
from zsched.integrations.celery import BRIDGE_TASK, from_beat_schedule


def project(tz: str | None = "Europe/Berlin", **extra) -> Celery:
    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.timezone = tz
    app.conf.beat_schedule = {
        "nightly-backup": {
            "task": "proj.tasks.backup_database",
            "schedule": crontab(hour=2, minute=0),
            "options": {"queue": "maintenance", "expires": 3600},
        },
        "cleanup": {"task": "proj.tasks.cleanup", "schedule": timedelta(minutes=10)},
        "token-refill": {"task": "proj.tasks.refill", "schedule": 1.0, "args": (50,)},
        "weekly-digest": {
            "task": "proj.tasks.send_digest",
            "schedule": crontab(minute=30, hour=7, day_of_week="mon"),
            "kwargs": {"kind": "weekly"},
            "options": {"priority": 5, "routing_key": "mail.digest"},
        },
        **extra,
    }
    return app


def test_a_typical_beat_schedule_becomes_the_expected_rules() -> None:
    rules = from_beat_schedule(project())
    pay = {k: v["payload"] for k, v in rules.items()}
    assert {k: v["task"] for k, v in rules.items()} == dict.fromkeys(rules, BRIDGE_TASK)
    assert (rules["nightly-backup"]["cron"], rules["nightly-backup"]["tz"]) == (
        "0 2 * * *", "Europe/Berlin")  # fmt: skip
    assert pay["nightly-backup"]["celery_task"] == "proj.tasks.backup_database"
    assert pay["nightly-backup"]["options"] == {"queue": "maintenance", "expires": 3600}
    assert rules["cleanup"]["every"] == timedelta(minutes=10) and "cron" not in rules["cleanup"]
    assert rules["token-refill"]["every"] == 1.0
    assert pay["token-refill"]["args"] == [50]
    assert pay["token-refill"]["grace_ms"] == 500  # half the 1 s gap: zsched's default
    assert (rules["weekly-digest"]["cron"], pay["weekly-digest"]["kwargs"]) == (
        "30 7 * * mon", {"kind": "weekly"})  # fmt: skip
    assert pay["weekly-digest"]["options"] == {"priority": 5, "routing_key": "mail.digest"}


def test_declared_rules_sync_like_code_declared_rules(redis_url, queue) -> None:
    app = zsched.App(redis_url, queue=queue)
    from_beat_schedule(project(), app, misfire="catch_up")
    assert sorted(app.declared) == ["cleanup", "nightly-backup", "token-refill", "weekly-digest"]
    first = app.sync_schedules()
    assert sorted(first.get("created", [])) == sorted(app.declared), first
    assert not app.sync_schedules().get("created")  # a second start changes nothing
    assert [i.schedule_id for i in app.schedules()] == sorted(app.declared)
    app.close()


def test_an_app_without_a_timezone_is_refused() -> None:
    with pytest.raises(RuleError, match="no timezone set"):
        from_beat_schedule(project(tz=None))


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"task": "t", "schedule": solar.__new__(solar)}, "'sun': solar"),
        ({"task": "t", "schedule": type("Odd", (schedule,), {})(10)}, "'sun': custom schedule"),
        ({"task": "t", "schedule": crontab(day_of_month=1, day_of_week=1)}, "'sun': crontab"),
        ({"task": "t", "schedule": 10, "options": {"countdown": 5}}, "countdown"),
    ],
)
# solar.__new__: a solar schedule without the ephem package (the refusal reads only its type).
def test_what_zsched_cannot_express_is_refused_naming_the_entry(entry, match) -> None:
    with pytest.raises(RuleError, match=match):
        from_beat_schedule(project(sun=entry))
