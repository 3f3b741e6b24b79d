"""AsyncApp's enqueues ride through a lost reply or a restart of Redis as App's do (bounded
retry with backoff, the run id fixed before the first attempt, the same logs and errors), and
the loop runs on while they wait (retrying.ride_through_async)."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
import redis
from redis_server import RedisServer, free_port
from rel_helpers import Proxy, until

import zsched
from tests.state import delayed_count
from zsched.observability.metrics import Metrics
from zsched.store.scripts import source


class Ticker:
    """Counts turns of the loop: a blocked loop would not count while a call waits."""

    def __init__(self) -> None:
        self.turns = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0.01)

    def stop(self) -> None:
        self._task.cancel()


async def test_a_lost_reply_is_retried_inside_async_enqueue_and_makes_one_run(
    redis_server, queue, caplog
) -> None:
    caplog.set_level(logging.INFO)
    proxy = Proxy(redis_server.port)
    aio = zsched.AsyncApp(proxy.url, queue=queue, metrics=Metrics())
    r = redis.Redis.from_url(redis_server.url)
    for name in ("enqueue", "replace"):
        r.script_load(source(name))  # else the lost reply could be a NOSCRIPT
    await aio.enqueue("t", run_id="warm", delay=60)  # the layout check is behind us
    proxy.lose_reply_to(b"EVALSHA")
    rid = await aio.enqueue("t", delay=60)  # no id given: made once, before the first attempt
    assert proxy.lost == 1
    assert not rid.duplicate  # a fresh id can only have met this call's own first attempt
    k = aio.keys
    assert r.hlen(k.runs) == 2 and delayed_count(r, k) == 2
    assert rid.encode() in r.hkeys(k.runs)
    assert aio.metrics.enqueued.labels(queue)._value.get() == 2
    proxy.lose_reply_to(b"EVALSHA")
    moved = await aio.enqueue("t", "new", run_id="warm", delay=120, on_conflict="replace")
    assert proxy.lost == 2 and moved.replaced and r.hlen(k.runs) == 2
    warnings = [x for x in caplog.records if "lost Redis" in x.getMessage()]
    assert len(warnings) == 2 and all(w.levelno == logging.WARNING for w in warnings)
    assert any("reached Redis again" in x.getMessage() for x in caplog.records)
    r.close()
    await aio.aclose()
    proxy.close()


async def test_async_enqueue_waits_through_a_redis_restart_with_the_loop_running(
    tmp_path, queue, caplog
) -> None:
    caplog.set_level(logging.INFO)
    srv = RedisServer("--appendonly", "yes", "--appendfsync", "always", dir=str(tmp_path))
    srv.start()
    try:
        aio = zsched.AsyncApp(srv.url, queue=queue, metrics=Metrics())
        await aio.enqueue("t", run_id="before", delay=60)
        srv.kill()
        ticker = Ticker()
        call = asyncio.create_task(aio.enqueue("t", run_id="during", delay=60))
        await until(lambda: any("enqueue lost Redis" in x.getMessage() for x in caplog.records),
                    "the first failed attempt")  # fmt: skip
        turns = ticker.turns
        await until(lambda: ticker.turns > turns + 2, "the loop turning while enqueue waits")
        assert not call.done()
        srv.start()
        got = await asyncio.wait_for(call, 30)
        ticker.stop()
        assert got == "during" and not got.duplicate
        assert (await aio.get_run("during")).state == "scheduled"
        assert (await aio.status()).delayed == 2
        assert any("reached Redis again" in x.getMessage() for x in caplog.records)
        await aio.aclose()
    finally:
        srv.stop()


async def test_past_the_bound_async_enqueue_names_the_queue_and_the_time_spent(queue) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    aio = zsched.AsyncApp(down, queue=queue, metrics=Metrics(),
                          settings=zsched.QueueSettings(outage_retry_ms=700))  # fmt: skip
    with pytest.raises(zsched.RedisUnavailable) as info:
        await aio.enqueue("t", run_id="r1")
    msg = str(info.value)
    assert f"enqueue in queue {queue!r} failed after" in msg
    assert int(re.search(r"and (\d+) attempt", msg).group(1)) > 1  # type: ignore[union-attr]
    await aio.aclose()
