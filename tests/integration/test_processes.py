"""Real processes: several dispatchers, killed workers, the wake-up path, SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter

import redis
from procs import stop, wait_for, zsched_proc

import zsched
from tests.state import delayed_count, delayed_due
from zsched.protocol.keys import QueueKeys


def test_four_dispatchers_never_dispatch_a_run_twice(redis_url, queue) -> None:
    """Invariant 4: 10,000 due runs, 4 dispatcher processes, each run on the stream once."""
    app = zsched.App(redis_url, queue=queue)
    r = app.redis
    procs = [zsched_proc("dispatcher", "--queue", queue, "--batch-size", "50", url=redis_url)
             for _ in range(4)]  # fmt: skip
    try:
        # All four running (each beats as it starts) before runs come due, so they race for
        # them; and none is still starting when it is stopped (SIGTERM before its handler).
        wait_for(lambda: r.zcard(app.keys.dispatchers) == 4, 60, "four dispatchers running")
        # Runs come due while all four race for them.
        now = time.time()
        for b in range(10):
            app.enqueue_many(
                [{"task": "t", "run_id": f"r{b}-{i}", "run_at": now + 0.1 * b} for i in range(1000)]
            )
        wait_for(lambda: r.xlen(app.keys.ready) >= 10_000 and delayed_count(r, app.keys) == 0,
                 60, "all runs dispatched")  # fmt: skip
        ids = Counter(f[b"run_id"] for _, f in r.xrange(app.keys.ready))
        assert len(ids) == 10_000 and set(ids.values()) == {1}
        assert int(r.hget(app.keys.stats, "dispatched")) == 10_000
    finally:
        outs = [stop(p) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs


def test_a_killed_workers_run_is_reclaimed_and_completed(redis_url, queue) -> None:
    r = redis.Redis.from_url(redis_url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("hang", None, run_id="h1")
    common = ("--queue", queue, "--visibility-timeout", "1")
    disp = zsched_proc("dispatcher", "--queue", queue, url=redis_url)
    w1 = zsched_proc("worker", "integration.apps.crashapp:app", *common, url=redis_url)
    try:
        try:
            wait_for(lambda: r.llen(f"test:{queue}:started") == 1, 30, "the run to start")
        finally:
            stop(w1, signal.SIGKILL)
        w2 = zsched_proc("worker", "integration.apps.crashapp:app", *common, url=redis_url)
        try:
            wait_for(lambda: app.get_run("h1").state == "done", 30, "the run to be reclaimed")
        finally:
            stop(w2)
    finally:
        stop(disp)
    executed = [x.decode().split("|") for x in r.lrange(f"test:{queue}:executed", 0, -1)]
    assert [(e[0], e[2]) for e in executed] == [("h1", "2")]  # second delivery
    assert int(r.hget(app.keys.stats, "reclaimed")) == 1


def test_sigterm_with_a_stuck_handler_hands_its_run_back_and_exits(redis_url, queue) -> None:
    r = redis.Redis.from_url(redis_url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("hang", None, run_id="stuck")
    disp = zsched_proc("dispatcher", "--queue", queue, url=redis_url)
    w = zsched_proc("worker", "integration.apps.crashapp:app", "--queue", queue,
                    "--shutdown-grace", "0.2", url=redis_url)  # fmt: skip
    try:
        wait_for(lambda: r.llen(f"test:{queue}:started") == 1, 30, "the run to start")
        out = stop(w, signal.SIGTERM, timeout=20)
        assert w.returncode == 0, out
        assert app.get_run("stuck").state in ("scheduled", "ready")  # handed back, not lost
    finally:
        stop(w, signal.SIGKILL)
        stop(disp)


def test_sigterm_finishes_running_work_and_loses_nothing(redis_url, queue) -> None:
    r = redis.Redis.from_url(redis_url)
    app = zsched.App(redis_url, queue=queue)
    app.enqueue_many([{"task": "slow", "payload": {"seconds": 0.3}, "run_id": f"s{i}"}
                      for i in range(40)])  # fmt: skip
    disp = zsched_proc("dispatcher", "--queue", queue, url=redis_url)
    args = ("worker", "integration.apps.crashapp:app", "--queue", queue, "--concurrency", "4")
    w1 = zsched_proc(*args, url=redis_url)
    try:
        wait_for(lambda: r.llen(f"test:{queue}:started") >= 4, 30, "runs to start")
        out = stop(w1, signal.SIGTERM)
        assert w1.returncode == 0, out
        st = app.status()
        assert st.pending == 0  # finished or handed back, none stranded
        w2 = zsched_proc(*args, url=redis_url)
        try:
            wait_for(lambda: int(r.hget(app.keys.stats, "acked") or 0) == 40, 60, "all 40 done")
        finally:
            stop(w2)
    finally:
        stop(disp)
    executed = Counter(x.decode().split("|")[0] for x in r.lrange(f"test:{queue}:executed", 0, -1))
    assert set(executed) == {f"s{i}" for i in range(40)}
    assert set(executed.values()) == {1}  # graceful: nothing ran twice


async def test_dispatcher_sleeps_until_due_and_wakes_for_an_earlier_run(redis_url, queue) -> None:
    """With a 60 s idle cap, only the wake-up channel can get the early run out in time."""
    app = zsched.App(redis_url, queue=queue)
    k = QueueKeys(queue)
    app.enqueue("t", None, run_id="far", delay=3600)
    d = app.dispatcher(max_idle_ms=60_000)
    stop_ev = asyncio.Event()
    task = asyncio.create_task(d.run(stop_ev))
    await asyncio.sleep(0.2)  # let it subscribe and go to sleep on the far run
    app.enqueue("t", None, run_id="soon", delay=0.3)
    deadline = time.monotonic() + 20
    while not app.redis.xlen(k.ready) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    fields = app.redis.xrange(k.ready)
    stop_ev.set()
    await task
    await d.close()
    assert [f[b"run_id"] for _, f in fields] == [b"soon"]
    assert delayed_due(app.redis, k, "far") is not None
