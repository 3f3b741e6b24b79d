"""The worker reads ahead of outcomes it has not written yet, within a count budget
(WorkerSettings.max_unwritten_acks): a finished run's ack no longer holds a handler slot."""

from __future__ import annotations

import asyncio
from typing import Any

from rel_helpers import until

import zsched
from zsched.observability.metrics import Metrics


async def _held_writes(app: zsched.App, ran: list[Any], **settings: Any) -> tuple[int, int]:
    """Run 10 due runs while the worker may not write any outcome; (runs started while
    blocked, acks counted in Redis at the end)."""
    for i in range(10):
        app.enqueue("t", i)
    stop = asyncio.Event()
    d, w = app.dispatcher(), app.worker(**settings)
    expected = min(10, settings["concurrency"] + settings["max_unwritten_acks"])
    async with w.writer.lock:  # flush waits on this lock: no ack can be written meanwhile
        tasks = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
        await until(lambda: len(ran) >= expected, f"{expected} runs started")
        # The reader stops once the budget is used: free slots are none (a read takes at
        # most the free slots, so no more can have started).
        await until(lambda: w.reader.free_slots() <= 0 or len(ran) == 10, "the budget used")
        started = len(ran)
    await until(lambda: int(app.redis.hget(app.keys.stats, "acked") or 0) == 10, "all acked")
    stop.set()
    await asyncio.gather(*tasks)
    await d.close()
    await w.close()
    return started, int(app.redis.hget(app.keys.stats, "acked") or 0)


def _app(url: str, queue: str, ran: list[Any]) -> zsched.App:
    app = zsched.App(url, queue=queue, metrics=Metrics())

    @app.task(name="t")
    async def t(payload: Any) -> None:
        ran.append(payload)

    return app


async def test_reads_run_ahead_of_unwritten_acks_within_the_budget(redis_server, queue) -> None:
    ran: list[Any] = []
    app = _app(redis_server.url, queue, ran)
    started, acked = await _held_writes(app, ran, concurrency=2, max_unwritten_acks=4)
    assert started == 6  # 2 slots + 4 acks written later, not 2
    assert acked == 10 and sorted(ran) == list(range(10))  # each ran once, all acked
    app.close()


async def test_a_zero_budget_holds_a_slot_until_the_ack_is_written(redis_server, queue) -> None:
    ran: list[Any] = []
    app = _app(redis_server.url, queue, ran)
    started, acked = await _held_writes(app, ran, concurrency=2, max_unwritten_acks=0)
    assert started == 2
    assert acked == 10 and sorted(ran) == list(range(10))
    app.close()
