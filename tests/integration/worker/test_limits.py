"""Limits per task, shared by all workers in Redis: several worker processes never run more
than max_concurrency at once (counted in a separate Redis), keep starts within the token
bucket's bound, defer without using an attempt, and a SIGKILLed worker does not leave the
limit short."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest
from procs import stop, wait_for, zsched_proc
from redis_server import RedisServer

import zsched
from zsched.observability.metrics import Metrics

FAST = {"visibility_timeout_ms": 1500, "block_ms": 100}


@pytest.fixture(scope="module")
def tracker():
    with RedisServer() as srv:
        yield srv


async def test_an_in_process_worker_runs_at_most_n_and_uses_no_attempt(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())
    now, peak, attempts = [0], [0], []

    @app.task(name="capped", max_concurrency=2)
    async def capped(payload: Any) -> None:
        now[0] += 1
        peak[0] = max(peak[0], now[0])
        attempts.append(zsched.current_run().attempt)
        await asyncio.sleep(0.02)
        now[0] -= 1

    app.enqueue_many([("capped", i) for i in range(8)])
    stop_ev = asyncio.Event()
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client(), concurrency=8, **FAST)
    loops = [asyncio.create_task(d.run(stop_ev)), asyncio.create_task(w.run(stop_ev))]
    deadline = time.monotonic() + 60
    while len(attempts) < 8:
        assert time.monotonic() < deadline, f"only {len(attempts)} of 8 ran"
        await asyncio.sleep(0.02)
    stop_ev.set()
    await asyncio.wait_for(asyncio.gather(*loops), 30)
    await d.close()
    await w.close()
    assert peak[0] <= 2 and attempts == [1] * 8
    deferred = app.metrics.registry.get_sample_value(
        "zsched_limit_deferred_total", {"queue": queue, "task": "capped"})  # fmt: skip
    assert deferred and deferred > 0
    assert not backend.sync.exists(app.keys.limit_holders("capped"))  # every share given back


def _procs(n: int, queue: str, url: str, tracker_url: str, *extra: str) -> list[Any]:
    env = {"ZSCHED_TRACKER_URL": tracker_url}
    args = ("worker", "integration.apps.limits_app:app", "--queue", queue, "--concurrency", "4",
            "--visibility-timeout", "1.5", *extra)  # fmt: skip
    return [zsched_proc(*args, url=url, env=env) for _ in range(n)]


def test_three_worker_processes_never_exceed_max_concurrency(redis_url, queue, tracker) -> None:
    import redis as redis_mod

    t = redis_mod.Redis.from_url(tracker.url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue_many([("capped", i) for i in range(30)])
    procs = [zsched_proc("dispatcher", "--queue", queue, url=redis_url),
             *_procs(3, queue, redis_url, tracker.url)]  # fmt: skip
    try:
        wait_for(lambda: t.llen(f"{queue}:capped:done") >= 30, 120, "30 capped runs")
    finally:
        for p in procs:
            stop(p)
    assert int(t.get(f"{queue}:capped:max")) == 2  # reached, never exceeded
    assert all(app.get_run(r).state == "done" for r in
               [x.decode() for x in t.lrange(f"{queue}:capped:done", 0, -1)])  # fmt: skip
    app.close()


def test_starts_stay_within_the_token_buckets_bound(redis_url, queue, tracker) -> None:
    import redis as redis_mod

    t = redis_mod.Redis.from_url(tracker.url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue_many([("rated", i) for i in range(30)])
    procs = [zsched_proc("dispatcher", "--queue", queue, url=redis_url),
             *_procs(2, queue, redis_url, tracker.url)]  # fmt: skip
    try:
        wait_for(lambda: t.llen(f"{queue}:rated:done") >= 30, 120, "30 rated runs")
    finally:
        for p in procs:
            stop(p)
    starts = sorted(int(x) for x in t.lrange(f"{queue}:rated:starts", 0, -1))
    # rate 20/s, burst 2: any window of T seconds holds at most 2 + 20 T starts; one more is
    # allowed for the time between a grant and the handler writing down its start. Windows
    # are judged at 1 s at least: the starts are written by two processes after their grants,
    # and on a loaded host a process that runs late bunches its writes with the other's (6
    # writes in 134 ms were seen from grants 50 ms apart; at 250 ms this failed at load 10). A
    # bucket that let runs through unthrottled (30 starts in ~0.1 s), or at twice the rate (30
    # in 0.7 s: 30 > 2 + 20 + 1), still fails.
    for i, a in enumerate(starts):
        for j in range(i + 1, len(starts)):
            window_s = max((starts[j] - a) / 1e6, 1.0)
            assert j - i + 1 <= 2 + 20 * window_s + 1, (i, j, window_s)
    app.close()


def test_a_sigkilled_worker_does_not_leave_the_limit_short(redis_url, queue, tracker) -> None:
    import redis as redis_mod

    t = redis_mod.Redis.from_url(tracker.url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("hang", None, run_id="first")
    disp = zsched_proc("dispatcher", "--queue", queue, url=redis_url)
    (doomed,) = _procs(1, queue, redis_url, tracker.url)
    try:
        wait_for(lambda: t.get(f"{queue}:hang:now") == b"1", 60, "the first run to hang")
        assert int(app.redis.zcard(app.keys.limit_holders("hang"))) == 1
        stop(doomed, signal.SIGKILL)
        t.decr(f"{queue}:hang:now")  # the killed handler never counted itself out
        app.enqueue("hang", None, run_id="second")
        (rescuer,) = _procs(1, queue, redis_url, tracker.url)
        try:
            # The dead worker's share comes back: the reclaimed first run and the second both
            # finish, one at a time (max_concurrency=1).
            wait_for(lambda: t.llen(f"{queue}:hang:done") >= 2, 60, "both runs after the kill")
        finally:
            stop(rescuer)
    finally:
        stop(disp)
    assert {app.get_run(r).state for r in ("first", "second")} == {"done"}
    assert int(t.get(f"{queue}:hang:max")) == 1
    assert int(app.redis.zcard(app.keys.limit_holders("hang"))) == 0
    app.close()


async def test_a_long_handler_keeps_its_share_past_the_hold(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())
    events: list[str] = []

    @app.task(name="long", max_concurrency=1)
    async def long(payload: Any) -> None:
        events.append(f"start {payload}")
        await asyncio.sleep(1.5 if payload == 1 else 0)  # 1.5 s: past a 0.6 s hold, renewed
        events.append(f"end {payload}")

    app.enqueue("long", 1, run_id="one")
    stop_ev = asyncio.Event()
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client(), concurrency=4, visibility_timeout_ms=600,
                   block_ms=100)  # fmt: skip
    loops = [asyncio.create_task(d.run(stop_ev)), asyncio.create_task(w.run(stop_ev))]
    deadline = time.monotonic() + 60
    while "start 1" not in events:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    app.enqueue("long", 2, run_id="two")
    while "end 2" not in events:
        assert time.monotonic() < deadline, events
        await asyncio.sleep(0.02)
    stop_ev.set()
    await asyncio.wait_for(asyncio.gather(*loops), 30)
    await d.close()
    await w.close()
    assert events == ["start 1", "end 1", "start 2", "end 2"]
