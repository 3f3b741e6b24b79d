"""A read takes up to the free slots plus the read-ahead budget (WorkerSettings.read_ahead,
fewer when envelopes are large: max_read_ahead_bytes, estimated from the last read; past the
budget an entry waits as ids only and its envelope is read again at its turn). Entries read
ahead wait in the worker in stream order: held and renewed like running ones, started as
slots free, cancellable before they start, handed back at shutdown."""

from __future__ import annotations

import asyncio

from zsched.protocol.keys import GROUP
from zsched.worker.loops import HoldLoop


def _app(real, queue, ran: list, release: asyncio.Event):
    app = real.app(queue)

    @app.task(name="t")
    async def t(payload):
        ran.append(payload)
        await release.wait()

    return app


def _pending(app, w) -> int:
    return int(app.redis.xpending(app.keys.ready, GROUP)["pending"])


def _queue(real, queue, payloads, release: asyncio.Event | None = None, **worker):
    """An app whose task records its payload and waits on `release`, the payloads enqueued,
    a dispatcher and a worker (`worker`: its settings), neither started."""
    ran: list = []
    release = release or asyncio.Event()
    app = _app(real, queue, ran, release)
    ids = [app.enqueue("t", p) for p in payloads]
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client(), **worker)
    return app, ran, release, ids, d, w


async def test_a_read_takes_the_free_slots_plus_the_read_ahead_and_starts_them_in_order(
    real, queue
) -> None:
    app, ran, release, _, d, w = _queue(real, queue, range(8), concurrency=2, read_ahead=3)
    await w.setup()
    assert (await d.tick()).moved == 8
    assert await w.reader.tick() == 2  # 5 read: 2 started, 3 wait
    waiting = [x.entry_id for x in w.runner.waiting]
    assert ran == [0, 1] and len(waiting) == 3 and _pending(app, w) == 5
    assert set(waiting) <= set(w.holds.entry_ids())  # renewed with the running ones
    assert await w.holds.renew() == 0
    assert await w.reader.tick() == 0 and _pending(app, w) == 5  # no slot: no read
    release.set()
    await w.runner.drain()
    assert await w.reader.tick() == 6  # the 3 waiting, then a read of the last 3
    assert ran == list(range(8)) and not w.runner.waiting
    await w.flush()
    assert _pending(app, w) == 0
    await d.close()
    await w.close()


async def test_no_read_ahead_reads_only_the_free_slots(real, queue) -> None:
    app, ran, _, _, d, w = _queue(real, queue, range(5), concurrency=2, read_ahead=0)
    await w.setup()
    await d.tick()
    assert await w.reader.tick() == 2
    assert not w.runner.waiting and _pending(app, w) == 2
    for t in list(w.runner.tasks):
        t.cancel()
    await d.close()
    await w.close()


async def test_large_envelopes_read_ahead_fewer(real, queue) -> None:
    big = ["x" * 1000 + str(i) for i in range(4)]
    app, ran, _, _, d, w = _queue(real, queue, big, concurrency=1, read_ahead=50,
                                  max_read_ahead_bytes=2500)  # fmt: skip
    await w.setup()
    await d.tick()
    assert w.reader.read_ahead() == 50  # nothing read yet: the count budget
    await w.reader.tick()
    assert w.reader.envelope_bytes > 1000 and w.reader.read_ahead() == 2
    for t in list(w.runner.tasks):
        t.cancel()
    await d.close()
    await w.close()


def _held_bytes(w) -> int:
    return sum(len(x.raw) for x in w.runner.waiting)


async def test_the_byte_budget_bounds_what_waits_even_when_the_read_was_sized_too_large(
    real, queue
) -> None:
    # Nothing read yet, so the estimate lets the first read take 1 + 10 large envelopes:
    # past the budget they wait as ids only (held, in order) and are read again at their turn.
    big = ["x" * 1000 + str(i) for i in range(11)]
    app, ran, release, _, d, w = _queue(real, queue, big, concurrency=1, read_ahead=10,
                                        max_read_ahead_bytes=2500)  # fmt: skip
    await w.setup()
    await d.tick()
    assert await w.reader.tick() == 1 and len(w.runner.waiting) == 10
    assert 2000 < _held_bytes(w) <= 2500  # two envelopes kept, eight spilled
    assert sum(x.spilled for x in w.runner.waiting) == 8
    assert {x.entry_id for x in w.runner.waiting} <= set(w.holds.entry_ids())
    assert await w.holds.renew() == 0
    release.set()
    while len(ran) < len(big):
        await w.runner.drain()
        assert await w.reader.tick() > 0
        assert _held_bytes(w) <= 2500
    assert ran == big  # each once, in stream order, with its own payload
    await w.flush()
    assert _pending(app, w) == 0
    await d.close()
    await w.close()


async def test_a_spilled_entry_gone_from_the_stream_is_acked_and_dropped(real, queue) -> None:
    big = ["x" * 1000 + str(i) for i in range(3)]
    app, ran, release, _, d, w = _queue(real, queue, big, concurrency=1, read_ahead=2,
                                        max_read_ahead_bytes=1500)  # fmt: skip
    await w.setup()
    await d.tick()
    assert await w.reader.tick() == 1
    gone = w.runner.waiting[1]
    assert gone.spilled and not w.runner.waiting[0].spilled
    app.redis.xdel(app.keys.ready, gone.entry_id)
    release.set()
    while w.runner.waiting:
        await w.runner.drain()
        await w.reader.tick()
    await w.runner.drain()
    await w.flush()
    assert ran == big[:2] and _pending(app, w) == 0
    await d.close()
    await w.close()


async def test_a_cancelled_run_read_ahead_ends_cancelled_without_running(real, queue) -> None:
    app, ran, release, (first, second), d, w = _queue(real, queue, [1, 2], concurrency=1,
                                                      read_ahead=1)  # fmt: skip
    await w.setup()
    await d.tick()
    assert await w.reader.tick() == 1 and [x.run_id for x in w.runner.waiting] == [second]
    app.cancel(second)
    await HoldLoop(w.ctx, w.runner, w.holds).tick()
    release.set()
    await w.runner.drain()
    assert await w.reader.tick() == 1
    await w.flush()
    assert ran == [1]
    assert [app.get_run(r).state for r in (first, second)] == ["done", "cancelled"]
    await d.close()
    await w.close()


async def test_shutdown_hands_back_the_runs_read_ahead(real, queue) -> None:
    app, ran, release, ids, d, w = _queue(real, queue, range(4), concurrency=1, read_ahead=3,
                                          block_ms=50)  # fmt: skip
    await d.tick()
    stop = asyncio.Event()
    run = asyncio.create_task(w.run(stop))
    while len(w.runner.waiting) < 3:
        await asyncio.sleep(0)  # the reader's own steps: no time threshold
    stop.set()
    release.set()  # the running one finishes within the grace
    await run
    assert ran == [0] and _pending(app, w) == 0
    assert [app.get_run(r).state for r in ids[1:]] == ["scheduled"] * 3  # back, due now
    await d.close()
    await w.close()


async def test_the_loop_sends_the_next_read_once_the_runs_of_the_last_have_started(
    real, queue
) -> None:
    release = asyncio.Event()
    release.set()  # handlers that never wait
    app, ran, _, _, d, w = _queue(real, queue, range(12), release, concurrency=4, read_ahead=4,
                                  read_batch=5)  # fmt: skip
    await w.setup()
    await d.tick()
    r = w.reader
    r.prefetching = True  # as in run()
    assert await r.tick() == 5  # a full read of 5, all ended: the next one was sent
    assert r.prefetch is not None and r.prefetch_count == 5  # a full read_batch, not 4 + 4 - 5
    assert await r.tick() == 5 and ran == list(range(10))  # the prefetched 5, in stream order
    assert r.prefetch is not None
    await asyncio.wait([r.prefetch])
    # A finished prefetch's entries wait, held (renewed), before any tick takes them: with
    # every slot busy they must not go idle (the chaos smoke's duplicates).
    assert [x.run_id for x in w.runner.waiting]
    r._drop_prefetch()
    assert r.prefetch is None
    assert set(x.entry_id for x in w.runner.waiting) <= set(w.holds.entry_ids())
    r.prefetching = False
    while len(ran) < 12:
        assert await r.tick() > 0
    assert ran == list(range(12))  # each once, in stream order
    await w.flush()
    assert _pending(app, w) == 0
    await d.close()
    await w.close()


async def test_a_worker_that_was_paused_drops_what_another_took_instead_of_running_it(
    real, queue
) -> None:
    app, ran, release, _, d, w = _queue(real, queue, range(3), concurrency=1, read_ahead=2)
    await w.setup()
    await d.tick()
    assert await w.reader.tick() == 1
    taken = w.runner.waiting[0].entry_id  # another consumer reclaims it while w is paused
    assert app.redis.xclaim(app.keys.ready, GROUP, "other", 0, [taken], justid=True)
    w.holds.renewed_at -= 3600  # as after a SIGSTOP: the last renewal is long ago
    release.set()
    await w.runner.drain()
    assert await w.reader.tick() == 1  # renewed first: the taken entry is dropped, not run
    assert ran == [0, 2] and taken not in w.holds.entry_ids()
    await d.close()
    await w.close()
