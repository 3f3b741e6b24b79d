"""A hung Redis (SIGSTOP: connections stay open, nothing answers), not a dead one: the
dispatcher, the worker and an enqueue each notice it within their socket timeouts, back off,
log it once (one WARNING when it begins, one INFO line when it ends) and resume; every run
executes. The chaos suite has the same fault under load (tests/chaos, `redis_stop`)."""

from __future__ import annotations

import asyncio
import logging
import signal

from redis_server import RedisServer
from rel_helpers import alive, records, running, until

import zsched
from zsched.observability.metrics import Metrics


def lost(caplog, who: str) -> list[logging.LogRecord]:
    return [r for r in records(caplog, logging.WARNING, "lost Redis")
            if r.getMessage().startswith(f"{who} lost Redis")]  # fmt: skip


async def test_a_hung_redis_is_noticed_waited_out_logged_once_and_left(queue, caplog) -> None:
    caplog.set_level(logging.INFO)
    with RedisServer() as srv:
        # A short socket timeout so that the test notices quickly; production keeps 5 s.
        app = zsched.App(srv.url + "?socket_timeout=1", queue=queue, metrics=Metrics())
        ran: set[str] = set()

        @app.task(name="t")
        async def t(payload: object) -> None:
            ran.add(zsched.current_run().run_id)

        async with running(app, visibility_timeout_ms=30_000) as tasks:
            # Runs that come due while Redis hangs: the dispatcher wakes and meets the hang.
            app.enqueue_many([{"task": "t", "run_id": f"r{i}", "delay": 0.3 + i * 0.05}
                              for i in range(40)])  # fmt: skip
            assert srv.proc is not None
            srv.proc.send_signal(signal.SIGSTOP)
            try:
                during = asyncio.create_task(asyncio.to_thread(app.enqueue, "t", run_id="mid"))
                await until(lambda: lost(caplog, "dispatcher") and lost(caplog, "worker")
                            and lost(caplog, "enqueue"), "every part noticing the hang", 60)  # fmt: skip
            finally:
                srv.proc.send_signal(signal.SIGCONT)
            assert await during == "mid"  # the enqueue rode through the hang
            want = {f"r{i}" for i in range(40)} | {"mid"}
            await until(lambda: ran >= want, "every run", 60)
            await until(lambda: len(records(caplog, logging.INFO, "reached Redis again")) >= 3,
                        "each part saying the outage ended", 30)  # fmt: skip
            assert alive(tasks)
        for who in ("dispatcher", "worker", "enqueue"):
            assert len(lost(caplog, who)) == 1, who  # once, not once per attempt
        app.close()
