"""The worker's own loops under normal conditions: an idle blocking read is not a lost
connection, and hold renewal racing acks never reports a finished run as lost."""

from __future__ import annotations

import asyncio
import logging

from rel_helpers import alive, records, running, until

import zsched
from zsched.observability.metrics import Metrics


async def test_an_idle_worker_does_not_take_its_blocking_read_for_a_lost_connection(
    redis_server, queue, caplog
) -> None:
    caplog.set_level(logging.INFO)
    # redis-py 8 gives every connection a 5 s socket timeout by default; a short one here
    # makes the idle read (block_ms 5000 by default) outlast it quickly.
    app = zsched.App(redis_server.url + "?socket_timeout=0.5", queue=queue, metrics=Metrics())
    ran = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(payload)

    async with running(app) as tasks:
        await asyncio.sleep(1.5)  # idle: three socket timeouts long, nothing to wait for
        assert records(caplog, logging.WARNING, "lost Redis") == []
        app.enqueue("t", 1)
        await until(lambda: ran == [1], "the run")
        assert alive(tasks)


async def test_renewing_holds_while_acks_land_never_reports_a_finished_run_lost(
    redis_server, queue, caplog
) -> None:
    caplog.set_level(logging.INFO)
    app = zsched.App(redis_server.url, queue=queue, metrics=Metrics())
    n = 3000
    done = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        await asyncio.sleep(0.001)
        done.append(payload)

    app.enqueue_many([("t", i) for i in range(n)])
    # A hold renewal every 50 ms while acks land all the time.
    async with running(app, visibility_timeout_ms=150, concurrency=64) as tasks:
        await until(lambda: len(done) == n, "every run", 60)
        await until(lambda: app.status().pending == 0, "the last acks")
        assert alive(tasks)
    assert records(caplog, logging.WARNING, "another consumer owns them") == []
    assert int(app.redis.hget(app.keys.stats, "fenced") or 0) == 0
