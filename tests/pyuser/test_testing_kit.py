"""zsched.testing.Kit: the real path on fakeredis or a real server, with a FakeClock."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

import zsched
from zsched.testing import Kit

START = datetime(2027, 1, 4, 8, tzinfo=UTC)


def _app(url: str = "redis://127.0.0.1:1/0") -> zsched.App:
    app = zsched.App(url, "orders")

    @app.task(name="work", max_attempts=2, backoff=5)
    def work(payload):
        if payload == "always-fails":
            raise RuntimeError("boom")

    return app


def test_the_kit_points_an_app_at_itself_and_gives_it_back() -> None:
    app = _app()
    before = (app.redis, app.url, app.clock)
    with Kit(app, start=START) as kit:
        assert app.redis is not before[0] and app.url is None and app.clock is kit.clock
        app.enqueue("work", "ok", run_id="r1")
        assert [o.outcome for o in kit.drain()] == ["done"]
        assert app.get_run("r1").state == "done"
    assert (app.redis, app.url, app.clock) == before


def test_retries_run_at_their_due_time_and_the_last_failure_is_a_dead_letter() -> None:
    with Kit(_app(), start=START) as kit:
        kit.app.enqueue("work", "always-fails", run_id="bad")
        outcomes = kit.drain()
        assert [(o.attempt, o.outcome) for o in outcomes] == [(1, "retried"), (2, "dead")]
        assert "RuntimeError: boom" in outcomes[-1].reason
        assert kit.now > START  # the clock moved to the retry's due time
        (letter,) = kit.dead_letters()
        assert letter.run_id == "bad" and "boom" in letter.reason


def test_without_retries_drain_leaves_the_retry_scheduled() -> None:
    with Kit(_app(), start=START) as kit:
        kit.app.enqueue("work", "always-fails", run_id="bad")
        assert [o.outcome for o in kit.drain(retries=False)] == ["retried"]
        (queued,) = kit.enqueued()
        assert (queued.run_id, queued.attempt, queued.state) == ("bad", 2, "scheduled")
        assert kit.now == START


def test_advance_stops_at_each_slot_like_a_dispatcher_that_never_stopped() -> None:
    with Kit(_app(), start=START) as kit:
        kit.app.schedule("tick", "work", every=60, misfire="coalesce")
        # Slots at START (it is on a minute) and each minute after it, up to +10 min: 11 fires,
        # where one jump of the clock would have coalesced them into one.
        assert kit.advance(timedelta(minutes=10)) == 11
        assert [o.outcome for o in kit.drain()] == ["done"] * 11
        assert [r["outcome"] for r in kit.ledger("tick")] == ["ran"] * 11
        assert kit.now == START + timedelta(minutes=10)


def test_rules_declared_in_code_are_synced_when_the_kit_starts() -> None:
    app = _app()
    app.declare("daily", "work", cron="0 6 * * *", tz="Europe/Berlin")
    with Kit(app, start=START) as kit:
        assert [i.schedule_id for i in app.schedules()] == ["daily"]
        run_id = kit.run_schedule_now("daily")  # a manual fire, now: the clock stays
        assert run_id == "daily@manual:2027-01-04T08:00:00Z" and kit.now == START
        assert [q.run_id for q in kit.enqueued()] == [run_id]
        assert [o.outcome for o in kit.drain()] == ["done"]
        assert [(r["outcome"], r["run_id"]) for r in kit.ledger("daily")] == [("manual", run_id)]
        with pytest.raises(zsched.ZschedError, match="advance the clock"):
            kit.run_schedule_now("daily")  # the same instant twice: one manual fire
        kit.advance(1)
        assert kit.run_schedule_now("daily") == "daily@manual:2027-01-04T08:00:01Z"


def test_a_partitioned_app_works_in_the_kit() -> None:
    app = zsched.App("redis://127.0.0.1:1/0", "p", partitions=3)
    app.task(name="work")(lambda payload: None)
    with Kit(app, start=START) as kit:
        app.enqueue_many([{"task": "work", "payload": i, "run_id": f"r{i}", "delay": 30}
                          for i in range(30)])  # fmt: skip
        assert kit.advance(30) == 30
        assert len(kit.drain()) == 30 and app.status().done_records == 30


def test_the_kit_runs_on_a_real_redis_server_too(redis_url, queue) -> None:
    with Kit(_app(), start=START, redis_url=redis_url, queue=queue) as kit:
        kit.app.enqueue("work", "ok", delay=5, run_id="real")
        assert kit.advance(5) == 1
        assert [o.outcome for o in kit.drain()] == ["done"]
    check = zsched.App(redis_url, queue)
    assert check.get_run("real").state == "done"  # written to the real server
    check.close()


async def test_inside_an_event_loop_the_plain_forms_refuse_and_the_a_forms_work() -> None:
    kit = Kit(_app(), start=START)
    kit.app.enqueue("work", "ok", delay=1)
    with pytest.raises(zsched.ZschedError, match="await the kit's a"):
        kit.advance(1)
    assert await kit.aadvance(1) == 1
    assert [o.outcome for o in await kit.adrain()] == ["done"]
    await kit.aclose()


def test_without_fakeredis_the_kit_and_the_simulator_name_the_extra() -> None:
    code = (
        "import sys; sys.modules['fakeredis'] = None\n"
        "import zsched\n"
        "from zsched.testing import Kit\n"
        "try:\n    Kit()\nexcept zsched.ConfigError as e:\n    print(e)\n"
        "from zsched.dispatch.simulate import fakeredis_module\n"
        "try:\n    fakeredis_module()\nexcept zsched.ConfigError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.count("pip install 'zsched[testing]'") == 2, out.stdout + out.stderr


def test_zsched_imports_without_fakeredis() -> None:
    code = "import sys; sys.modules['fakeredis'] = None; import zsched, zsched.cli.main"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_simulate_command_without_fakeredis_says_which_extra_to_install(redis_url, queue):
    zsched.App(redis_url, queue).schedule("nightly", "report", cron="0 2 * * *", tz="UTC")
    code = (
        "import sys; sys.modules['fakeredis'] = None\n"
        "from zsched.cli.main import main\n"
        f"sys.exit(main(['schedules', 'simulate', 'nightly', '--down',"
        f" '2026-01-01T00:00Z..2026-01-03T00:00Z', '--redis', '{redis_url}', '--queue', '{queue}']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert "pip install 'zsched[testing]'" in out.stderr and "Traceback" not in out.stderr


async def test_code_that_uses_an_async_app_runs_in_the_kit() -> None:
    aio = zsched.AsyncApp("redis://127.0.0.1:1/0", "orders")  # the user's, never reached here
    aio.task(name="work")(lambda payload: None)
    before = aio.redis
    kit = Kit(aio, start=START)
    await aio.enqueue("work", "ok", delay=5, run_id="a1")  # the code under test
    async with aio.app.aio() as other:  # an AsyncApp made from the App inside the kit
        assert (await other.get_run("a1")).state == "scheduled"
    assert await kit.aadvance(5) == 1
    assert [o.outcome for o in await kit.adrain()] == ["done"]
    assert (await aio.get_run("a1")).state == "done"
    await kit.aclose()
    assert aio.redis is before and aio.app.url == "redis://127.0.0.1:1/0"
    await aio.aclose()
