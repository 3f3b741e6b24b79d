"""Celery rules and the bridge's sending, in process: a recording stand-in for the Celery app
(what send_task receives), a real redis-server and zsched's real dispatcher and worker."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

import zsched
from zsched.errors import RuleError
from zsched.integrations.celery import BRIDGE_TASK, celery_rule, enqueue_celery, register_bridge
from zsched.integrations.celery.bridge import send_fire
from zsched.integrations.celery.rules import decode_fire
from zsched.observability.metrics import Metrics
from zsched.worker.tasks import RunInfo

T0 = 1_798_934_400_000  # 2027-01-04T00:00:00Z


class Recorder:
    """Stands in for a Celery app: keeps each send_task call."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def send_task(self, name: str, **kw) -> None:
        self.sent.append((name, kw))


def test_import_zsched_imports_no_integration_or_framework() -> None:
    code = ("import sys, zsched, zsched.cli.main; zsched.cli.main.build_parser(); "
            "app = zsched.App('redis://127.0.0.1:1/0'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('celery', 'kombu', 'django', 'django_tasks', 'starlette', 'fastapi') "
            "or m.startswith('zsched.integrations')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_issue_s_spelling_builds_a_bridge_rule(redis_url, queue) -> None:
    app = zsched.App(redis_url, queue=queue, metrics=Metrics())
    app.schedule("nightly-backup", celery_task="proj.tasks.backup_database", cron="0 2 * * *",
                 tz="Europe/Berlin", misfire="catch_up", overlap="skip")  # fmt: skip
    (info,) = app.schedules()
    assert info.schedule_id == "nightly-backup"
    task, opts = celery_rule("nightly-backup", "proj.tasks.backup_database", cron="0 2 * * *",
                             tz="Europe/Berlin", misfire="catch_up", overlap="skip")  # fmt: skip
    fire = decode_fire(opts["payload"])
    assert task == BRIDGE_TASK
    assert (fire.task, fire.grace_ms, fire.wait_s) == ("proj.tasks.backup_database", 60_000, 3600)
    app.close()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"celery_options": {"countdown": 5}}, "unsupported Celery option.*countdown"),
        ({"celery_options": {"priority": "high"}}, "priority must be an integer"),
        ({"celery_options": {"expires": "soon"}}, "expires must be seconds"),
        ({"celery_args": "abc"}, "celery args must be a list"),
        ({"payload": {"x": 1}}, "not payload"),
        ({"celery_wait": -1, "overlap": "skip"}, "celery_wait"),
    ],
)
def test_bad_celery_rules_are_refused_naming_the_rule(kw, match) -> None:
    with pytest.raises(RuleError, match=f"schedule r: .*{match}"):
        celery_rule("r", "proj.t", every=60, **kw)


def test_a_task_name_and_celery_task_together_are_refused(redis_url, queue) -> None:
    app = zsched.App(redis_url, queue=queue)
    with pytest.raises(ValueError, match="not both"):
        app.schedule("r", "some.task", celery_task="proj.t", every=60)
    with pytest.raises(ValueError, match="task name"):
        app.schedule("r", every=60)
    app.close()


def info(run_id: str, slot_ms: int, attempt: int = 1, deliveries: int = 1, fired_ms=None):
    at = datetime.fromtimestamp(slot_ms / 1000, UTC)
    fired = datetime.fromtimestamp(fired_ms / 1000, UTC) if fired_ms else at
    return RunInfo(run_id, BRIDGE_TASK, attempt, at, "q", "r", deliveries, fired)


def test_expires_is_the_slot_plus_grace_and_a_catch_up_replay_counts_from_its_fire(
    redis_url, queue
) -> None:
    app, rec = zsched.App(redis_url, queue=queue), Recorder()
    fire = decode_fire(celery_rule("r", "proj.t", every=60, misfire_grace=5,
                                   celery_options={"queue": "q1", "priority": 2})[1]["payload"])  # fmt: skip
    send_fire(app, rec, fire, info("r@1", T0))
    send_fire(app, rec, fire, info("r@2", T0, fired_ms=T0 + 600_000))  # replayed 10 min late
    (n1, kw1), (_, kw2) = rec.sent
    assert n1 == "proj.t" and kw1["task_id"] == "r@1"
    assert (kw1["queue"], kw1["priority"], kw1["args"], kw1["kwargs"]) == ("q1", 2, [], {})
    slot = datetime.fromtimestamp(T0 / 1000, UTC)
    assert kw1["expires"] == slot + timedelta(seconds=5)
    assert kw2["expires"] == slot + timedelta(minutes=10, seconds=5)
    assert kw1["headers"] == {"zsched_queue": queue}
    own = decode_fire(
        celery_rule("r", "proj.t", every=60, celery_options={"expires": None})[1]["payload"]
    )
    send_fire(app, rec, own, info("r@3", T0))
    assert rec.sent[-1][1]["expires"] is None
    app.close()


def test_a_redelivered_fire_that_was_sent_is_not_sent_again(redis_url, queue) -> None:
    app, rec = zsched.App(redis_url, queue=queue), Recorder()
    fire = decode_fire(celery_rule("r", "proj.t", every=60)[1]["payload"])
    send_fire(app, rec, fire, info("r@1", T0))
    send_fire(app, rec, fire, info("r@1", T0, deliveries=2))  # reclaimed after a crash
    send_fire(app, rec, fire, info("r@9", T0, deliveries=2))  # reclaimed, never sent
    assert [kw["task_id"] for _, kw in rec.sent] == ["r@1", "r@9"]
    app.close()


async def test_a_broker_outage_retries_the_send_then_it_goes_through(redis_url, queue) -> None:
    clock = zsched.FakeClock(T0)
    app = zsched.App(redis_url, queue=queue, clock=clock)

    class Flaky(Recorder):
        down = True

        def send_task(self, name: str, **kw) -> None:
            if self.down:
                raise ConnectionError("broker unreachable")
            super().send_task(name, **kw)

    rec = Flaky()
    register_bridge(app, rec)
    enqueue_celery(app, "proj.t", [1], run_id="one")
    d, w = app.dispatcher(), app.worker()
    await d.tick()
    await w.tick()
    assert app.get_run("one").state == "scheduled"  # retried with backoff, not lost
    rec.down = False
    clock.advance(3_600_000)
    await d.tick()
    await w.tick()
    assert [kw["task_id"] for _, kw in rec.sent] == ["one"]
    assert app.get_run("one").state == "done"
    await d.close()
    await w.close()
    app.close()


@pytest.mark.parametrize(
    ("ref", "message"),
    [("no_such_module_xyz:app", "cannot import module 'no_such_module_xyz'"),
     ("json:loads", "'json:loads' is not a Celery app")],
)  # fmt: skip
def test_the_bridge_cli_refuses_what_is_not_a_celery_app(redis_url, ref, message) -> None:
    out = subprocess.run([sys.executable, "-m", "zsched", "celery-bridge", ref, "--redis",
                          redis_url], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_a_done_report_is_read_again_by_a_redelivered_fire(redis_url, queue) -> None:
    """A bridge that dies after reading the hook's report, before its ack: the redelivery
    finds the report still there instead of waiting out celery_wait."""
    from zsched.integrations.celery.bridge import wait_done

    app = zsched.App(redis_url, queue=queue)
    app.redis.rpush(app.keys.celery_done("r@1"), "SUCCESS")
    assert wait_done(app, "r@1", 5) == "SUCCESS"
    assert wait_done(app, "r@1", 5) == "SUCCESS"
    assert wait_done(app, "r@2", 0.2) is None  # no report: the wait runs out
    app.close()
