"""Bad conditions: Redis down at start-up, restarted without its data, a reply lost with the
connection, maxmemory reached, a zsched key of the wrong type. For each: a clear error, the
processes keep running, and nothing accepted is lost (docs/reliability.md has the table)."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis_server import RedisServer, free_port
from rel_helpers import Proxy, alive, records, running, until

import zsched
from tests.state import delayed_count
from zsched import FakeClock
from zsched.observability.metrics import Metrics
from zsched.store.scripts import source

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000_000


def spawn(log: Path, *args: str, url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ZSCHED_REDIS_URL": url, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    with open(log, "wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "zsched", *args, "--redis", url],
            cwd=ROOT / "tests",
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )


def lines(log: Path, needle: str) -> list[str]:
    return [x for x in log.read_text(errors="replace").splitlines() if needle in x]


def wait_for(cond, what: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_processes_started_while_redis_is_down_retry_then_work(tmp_path: Path, queue: str):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    dlog, wlog = tmp_path / "dispatcher.log", tmp_path / "worker.log"
    app_ref = "reliability.rel_app:app"
    # -vv: the attempts after the first are DEBUG lines, so the test can count them.
    d = spawn(dlog, "-vv", "dispatcher", "--app", app_ref, "--queue", queue, url=url)
    w = spawn(wlog, "-vv", "worker", app_ref, "--queue", queue, url=url)
    try:
        wait_for(
            lambda: len(lines(dlog, "retrying in")) >= 4 and len(lines(wlog, "retrying in")) >= 4,
            "four attempts of each process",
        )
        assert d.poll() is None and w.poll() is None
        for log in (dlog, wlog):
            text = log.read_text()
            assert "Traceback" not in text
            # Each attempt names what failed and when the next one is ...
            assert all("Redis" in x and "ConnectionError" in x for x in lines(log, "retrying in"))
            # ... but only the first is a WARNING: an outage is one line at the default level.
            assert len([x for x in lines(log, "retrying in") if " WARNING " in x]) == 1
        with RedisServer(port=port):
            r = redis.Redis.from_url(url)
            zsched.App(url, queue=queue).enqueue("quick", run_id="after-the-outage")
            wait_for(lambda: r.llen(f"rel:{queue}:executed") == 1, "the run")
            # The declared rule was written once Redis came up, not lost at start-up.
            wait_for(
                lambda: r.hexists(zsched.App(url, queue=queue).keys.rules, "rel-hourly"),
                "the declared rule",
            )
            for p in (d, w):
                p.send_signal(signal.SIGTERM)
                assert p.wait(20) == 0
        for log in (dlog, wlog):  # the end of the outage is said once too
            assert len(lines(log, "reached Redis again")) == 1
    finally:
        for p in (d, w):
            if p.poll() is None:
                p.kill()
                p.wait()


async def test_redis_restarted_without_its_data_is_logged_loudly(queue: str, caplog) -> None:
    caplog.set_level(logging.INFO)
    with RedisServer() as srv:  # no AOF, no RDB: a restart loses everything
        app = zsched.App(srv.url, queue=queue, metrics=Metrics())
        ran: list[str] = []

        @app.task(name="t")
        async def t(payload: object) -> None:
            ran.append(zsched.current_run().run_id)

        async with running(app) as tasks:
            app.enqueue("t", run_id="before")
            await until(lambda: ran == ["before"], "the first run")
            app.enqueue("t", run_id="far-away", delay=3600)
            srv.kill()
            srv.start()
            await until(lambda: records(caplog, logging.ERROR, "lost"), "the data-loss error")
            zsched.App(srv.url, queue=queue).enqueue("t", run_id="after")
            await until(lambda: "after" in ran, "a run enqueued after the restart")
            assert alive(tasks)
    (err,) = records(caplog, logging.ERROR, "lost")
    text = err.getMessage()
    assert queue in text and "persistence" in text


async def test_lost_data_is_noticed_without_info_on_fakeredis(queue: str, caplog) -> None:
    import fakeredis

    server = fakeredis.FakeServer()
    app = zsched.App(fakeredis.FakeRedis(server=server, protocol=2), queue=queue, metrics=Metrics())
    d = app.dispatcher(redis=fakeredis.FakeAsyncRedis(server=server, protocol=2))
    d.watch.every_s = 0.05
    await d.watch.check(force=True)
    assert not records(caplog, logging.ERROR, "lost")
    app.redis.flushall()
    assert await d.watch.check(force=True)
    assert records(caplog, logging.ERROR, "lost")
    await d.close()


def test_an_enqueue_whose_reply_is_lost_is_a_duplicate_when_retried(redis_server, queue):
    proxy = Proxy(redis_server.port)
    # outage_retry_ms=0: enqueue raises at once instead of retrying (test_ride_through.py).
    app = zsched.App(proxy.url, queue=queue, metrics=Metrics(),
                     settings=zsched.QueueSettings(outage_retry_ms=0))  # fmt: skip
    r = redis.Redis.from_url(redis_server.url)
    r.script_load(source("enqueue"))  # else the lost reply could be a NOSCRIPT
    proxy.lose_reply_to(b"EVALSHA")
    with pytest.raises(redis.exceptions.ConnectionError):
        app.enqueue("t", run_id="r1")
    # The script ran before the connection dropped: retrying the same id adds nothing.
    again = app.enqueue("t", run_id="r1")
    assert again.duplicate and proxy.lost == 1
    k = app.keys
    assert r.hlen(k.runs) == 1 and delayed_count(r, k) == 1
    assert r.hmget(k.stats, "enqueued", "duplicate") == [b"1", b"1"]
    proxy.close()


async def test_an_ack_whose_reply_is_lost_is_refused_on_resend_and_runs_once(redis_server, queue):
    direct = zsched.App(redis_server.url, queue=queue, metrics=Metrics())
    proxy = Proxy(redis_server.port)
    app = zsched.App(proxy.url, queue=queue, metrics=Metrics())
    ran: list[str] = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(zsched.current_run().run_id)

    direct.enqueue("t", run_id="r1")
    d = direct.dispatcher()
    assert (await d.tick()).moved == 1
    w = app.worker()
    direct.redis.script_load(source("ack"))  # else the lost reply could be a NOSCRIPT
    proxy.lose_reply_to(hashlib.sha1(source("ack").encode()).hexdigest().encode())
    with pytest.raises(redis.exceptions.ConnectionError):
        await w.tick()
    assert ran == ["r1"] and direct.get_run("r1").state == "done"
    await w.flush()  # the worker kept the outcome and sends it again: refused, not re-run
    stats = direct.redis.hgetall(direct.keys.stats)
    # Refused as no longer pending (gone), not as fenced: no fence, no duplicate counted.
    assert (stats[b"acked"], stats[b"gone"], stats.get(b"fenced")) == (b"1", b"1", None)
    m = app.metrics
    assert m.fenced.labels(queue, "ack")._value.get() == 0
    assert m.duplicates.labels(queue, "worker")._value.get() == 0
    assert m.resent_written.labels(queue, "ack")._value.get() == 1
    assert ran == ["r1"] and direct.status().pending == 0
    await d.close()
    await w.close()
    proxy.close()


async def test_maxmemory_refuses_enqueue_clearly_and_loses_nothing(queue: str, caplog) -> None:
    caplog.set_level(logging.INFO)
    with RedisServer("--maxmemory-policy", "noeviction") as srv:
        r = redis.Redis.from_url(srv.url)
        r.config_set("maxmemory", r.info("memory")["used_memory"] + 2_000_000)
        clock = FakeClock(NOW)
        app = zsched.App(srv.url, queue=queue, clock=clock, metrics=Metrics())
        ran: set[str] = set()

        @app.task(name="t")
        async def t(payload: object) -> None:
            ran.add(zsched.current_run().run_id)

        accepted: list[str] = []
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="maxmemory"):
            for i in range(1000):
                batch = [f"r{i}-{j}" for j in range(100)]
                app.enqueue_many(
                    [
                        {
                            "task": "t",
                            "payload": "x" * 400,
                            "run_id": rid,
                            "run_at": NOW / 1000 + 60,
                        }
                        for rid in batch
                    ]
                )
                accepted += batch
        assert r.hlen(app.keys.runs) == len(accepted)  # the refused batch wrote nothing
        async with running(app, dispatcher={"max_idle_ms": 50}) as tasks:
            clock.advance(120_000)  # everything is due; dispatching needs memory
            await until(lambda: records(caplog, logging.ERROR, "maxmemory"), "the OOM error")
            assert alive(tasks)
            r.config_set("maxmemory", 0)
            await until(lambda: len(ran) == len(accepted), "every accepted run", 60)
            assert alive(tasks)
    assert ran == set(accepted)


async def test_a_zsched_key_of_the_wrong_type_is_an_error_not_a_crash(
    redis_server, queue, caplog
) -> None:
    caplog.set_level(logging.INFO)
    app = zsched.App(redis_server.url, queue=queue, metrics=Metrics())
    r, k = app.redis, app.keys
    ran: list[str] = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(zsched.current_run().run_id)

    async with running(app, dispatcher={"max_idle_ms": 50}, block_ms=50) as tasks:
        app.enqueue("t", run_id="first")
        await until(lambda: ran == ["first"], "the first run")
        r.delete(k.ready)
        r.set(k.ready, "not a stream")  # e.g. another program's key in our namespace
        # The dispatcher meets the key when it has a run to move onto it.
        app.enqueue("t", run_id="stuck")
        await until(
            lambda: len(records(caplog, logging.ERROR, "WRONGTYPE")) >= 2,
            "errors from the dispatcher and the worker",
        )
        names = {rec.name for rec in records(caplog, logging.ERROR, "WRONGTYPE")}
        assert {"zsched.dispatch.dispatcher", "zsched.worker.worker"} <= names
        assert alive(tasks)
        r.delete(k.ready)
        app.enqueue("t", run_id="after")
        await until(lambda: {"stuck", "after"} <= set(ran), "the runs, once the key was fixed")
        assert alive(tasks)
