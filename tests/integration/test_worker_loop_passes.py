"""One pass of each worker loop, driven by its tick() without the loop (STYLE.md: a loop class
has run() for the sleep/wake logic and tick() for one pass that returns what it did)."""

from __future__ import annotations

import asyncio
import logging

from zsched import FakeClock
from zsched.protocol.keys import GROUP
from zsched.worker.loops import FlushLoop, HoldLoop

NOW = 1_800_000_000_000


def _app(backend, queue, ran):
    app = backend.app(queue, clock=FakeClock(NOW))

    @app.task(name="t")
    async def t(payload):
        ran.append(payload)

    return app


async def _dispatched(app, backend, n):
    app.enqueue_many([("t", i) for i in range(n)])
    d = app.dispatcher(redis=backend.async_client())
    assert (await d.tick()).moved == n
    await d.close()


async def test_a_read_pass_starts_what_is_ready_and_no_more_than_the_free_slots(
    backend, queue
) -> None:
    ran: list[int] = []
    app = _app(backend, queue, ran)
    await _dispatched(app, backend, 5)
    # No read-ahead: a read takes the free slots (test_read_ahead_budget.py reads beyond).
    w = app.worker(redis=backend.async_client(), concurrency=3, read_ahead=0)
    await w.setup()
    assert await w.reader.tick() == 3  # the free slots, not the 5 ready
    await w.runner.drain()
    assert sorted(ran) == [0, 1, 2]
    assert w.writer.unwritten()  # executed, not written: the flush loop's work
    assert await FlushLoop(w.runner, w.writer).tick() is True
    assert app.status().stats.get("acked") == 3
    assert await FlushLoop(w.runner, w.writer).tick() is False  # nothing left to write
    assert await w.reader.tick() == 2
    await w.drain()
    assert sorted(ran) == [0, 1, 2, 3, 4] and app.status().stats.get("acked") == 5
    await w.close()


async def test_a_read_pass_reclaims_an_idle_entry_of_a_dead_consumer(backend, queue) -> None:
    ran: list[int] = []
    app = _app(backend, queue, ran)
    await _dispatched(app, backend, 1)
    dead = app.worker(redis=backend.async_client(), consumer="dead")
    await dead.setup()
    (lost,) = await dead.reader.read(10, None)  # read, then the consumer died
    rescuer = app.worker(redis=backend.async_client(), consumer="rescuer",
                         visibility_timeout_ms=0)  # fmt: skip
    # Idle past a visibility timeout of 0 means idle >= 1 ms on fakeredis (strict) and not
    # always in the same millisecond as the read: wait for the entry to age, then pass.
    while not app.redis.xpending_range(app.keys.ready, GROUP, "-", "+", 1, idle=1):
        await asyncio.sleep(0.001)
    assert await rescuer.reader.tick() == 1  # reclaimed, not read: the stream had no new entry
    await rescuer.drain()
    assert ran == [0] and app.get_run(lost.run_id).state == "done"
    assert app.status().stats.get("reclaimed") == 1
    await dead.close()
    await rescuer.close()


async def test_a_hold_pass_renews_the_holds_and_counts_the_ones_another_consumer_took(
    backend, queue, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="zsched")
    ran: list[int] = []
    app = _app(backend, queue, ran)
    await _dispatched(app, backend, 3)
    w = app.worker(redis=backend.async_client(), consumer="w")
    await w.setup()
    held = await w.reader.read(3, None)
    for d in held:  # executing, as far as the hold loop can tell
        w.runner.running[d.entry_id] = d
    hold = HoldLoop(w.ctx, w.runner, w.holds)
    assert await hold.tick() == 0
    taken = [held[0].entry_id, held[1].entry_id]
    backend.sync.xclaim(app.keys.ready, GROUP, "other", 0, taken)
    assert await hold.tick() == 2
    assert w.writer.lost == set(taken)
    assert app.metrics.fenced.labels(queue, "renew")._value.get() == 2
    # One WARNING for the pass, naming the entries, not one per entry.
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("lost 2 entry(ies)") and all(e in line for e in taken), line
    await w.close()
