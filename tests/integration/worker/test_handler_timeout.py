"""A sync handler's `timeout` (issue 18, defect 7). Python cannot stop a thread, so a timed-out
handler keeps its thread: that lost capacity is shown (a gauge and a log line naming the run),
no other run is charged for it, and the run's retry never starts beside its own attempt."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from typing import Any

import zsched

WAIT_S = 20.0


async def _until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_stuck_sync_handler_costs_capacity_not_other_runs_attempts(real, queue,
                                                                          caplog) -> None:  # fmt: skip
    app = real.app(queue)
    gate, started = threading.Event(), threading.Event()
    lock = threading.Lock()
    active: Counter[str] = Counter()
    most: Counter[str] = Counter()
    calls: list[tuple[str, int]] = []

    def body() -> None:
        info = zsched.current_run()
        with lock:
            calls.append((info.run_id, info.attempt))
            active[info.run_id] += 1
            most[info.run_id] = max(most[info.run_id], active[info.run_id])
        try:
            if (info.run_id, info.attempt) == ("r1", 1):
                started.set()
                gate.wait(WAIT_S)  # stuck well past its timeout
        finally:
            with lock:
                active[info.run_id] -= 1

    app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)(lambda p: body())
    app.task(name="quick", timeout=0.2, max_attempts=3, backoff=0)(lambda p: body())
    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client(), concurrency=1)
    stop = asyncio.Event()
    loops = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    stuck = app.metrics.stuck_handlers.labels(queue)
    try:
        caplog.set_level(logging.WARNING, logger="zsched.worker.worker")
        app.enqueue("slow", None, run_id="r1")
        await asyncio.to_thread(started.wait, WAIT_S)
        await _until(lambda: stuck._value.get() == 1, "the stuck gauge")
        assert any("r1" in r.getMessage() and "still running" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
        app.enqueue("quick", None, run_id="r2")
        await asyncio.sleep(1.0)  # time for r2 to be taken and time out while no thread is free
        gate.set()
        done = app.keys.done
        await _until(lambda: real.sync.zscore(done, "r1") and real.sync.zscore(done, "r2"),
                     "both runs done")  # fmt: skip
    finally:
        gate.set()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*loops), 20)
        await d.close()
        await w.close()
    assert [c for c in calls if c[0] == "r2"] == [("r2", 1)]  # not charged for r1's thread
    assert [c for c in calls if c[0] == "r1"] == [("r1", 1), ("r1", 2)]
    assert most["r1"] == 1  # the retry did not start beside its own timed-out attempt
    assert stuck._value.get() == 0
    assert real.sync.xlen(app.keys.dead) == 0
    # r1's first attempt returned (did its work) after its timeout, and was retried: counted
    # as a duplicate execution; r2, which never timed out, is not.
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 1


async def test_an_async_handler_past_its_timeout_is_retried(real, queue) -> None:
    app = real.app(queue)
    attempts: list[int] = []

    @app.task(name="a", timeout=0.1, max_attempts=2, backoff=0)
    async def a(payload: Any) -> None:
        attempts.append(zsched.current_run().attempt)
        if len(attempts) == 1:
            await asyncio.sleep(30)

    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    app.enqueue("a", None, run_id="a1")
    await d.tick()
    await w.tick()
    await d.tick()
    await w.tick()
    assert attempts == [1, 2]
    assert real.sync.zscore(app.keys.done, "a1")
    await d.close()
    await w.close()


async def test_a_sync_handler_that_raises_after_its_timeout_is_no_duplicate(real, queue) -> None:
    """Only a late *return* is a duplicate execution (its effect happened, and the retry runs
    it again); a late raise, or a late return on the last attempt (dead, no rerun), is not."""
    app = real.app(queue)
    attempts: list[int] = []

    @app.task(name="s", timeout=0.05, max_attempts=2, backoff=0)
    def s(payload: Any) -> None:
        attempts.append(zsched.current_run().attempt)
        time.sleep(0.3)  # past its timeout, then: attempt 1 raises, attempt 2 returns
        if len(attempts) == 1:
            raise RuntimeError("late failure")

    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    app.enqueue("s", None, run_id="s1")
    await d.tick()
    await w.tick()
    await d.tick()
    await w.tick()
    assert attempts == [1, 2]
    assert real.sync.xlen(app.keys.dead) == 1  # attempt 2 timed out too: the last one
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 0
    await d.close()
    await w.close()
