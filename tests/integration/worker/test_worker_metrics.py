"""The worker's histograms, observed in batches: every run counted once, and the start lag of
a long handler visible while it still runs (not only once it finishes)."""

from __future__ import annotations

import asyncio
import time

from zsched import FakeClock

NOW = 1_800_000_000_000


def _value(app, name: str, **labels: str) -> float:
    v = app.metrics.registry.get_sample_value(name, {"queue": app.queue, **labels})
    return 0.0 if v is None else v


async def test_every_run_is_observed_once_in_both_histograms(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))

    @app.task(name="t")
    async def t(payload):
        pass

    @app.task(name="u")
    async def u(payload):
        raise RuntimeError("boom")  # a retried run is observed too

    app.enqueue_many([("t", i) for i in range(30)] + [("u", i) for i in range(5)])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client(), read_batch=100)
    assert (await d.tick()).moved == 35
    assert await w.tick() == 35
    for task, n in (("t", 30), ("u", 5)):
        assert _value(app, "zsched_start_lag_seconds_count", task=task) == n
        assert _value(app, "zsched_run_duration_seconds_count", task=task) == n
        assert _value(app, "zsched_run_duration_seconds_bucket", task=task, le="+Inf") == n
    assert _value(app, "zsched_runs_completed_total", task="t", outcome="succeeded") == 30
    # Observed once: another pass with nothing new adds nothing.
    assert await w.tick() == 0
    assert _value(app, "zsched_start_lag_seconds_count", task="t") == 30
    await d.close()
    await w.close()


async def test_a_long_handlers_start_lag_shows_while_it_runs(real, queue) -> None:
    app = real.app(queue)
    started, release = asyncio.Event(), asyncio.Event()

    @app.task(name="long")
    async def long(payload):
        started.set()
        await release.wait()

    app.enqueue("long", None)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client(), block_ms=50)
    assert (await d.tick()).moved == 1
    stop = asyncio.Event()
    run = asyncio.create_task(w.run(stop))
    await asyncio.wait_for(started.wait(), 10)
    deadline = time.monotonic() + 10
    while _value(app, "zsched_start_lag_seconds_count", task="long") < 1:
        assert time.monotonic() < deadline, "start lag not observed while the handler ran"
        await asyncio.sleep(0.02)
    assert (
        not release.is_set() and _value(app, "zsched_run_duration_seconds_count", task="long") == 0
    )
    release.set()
    stop.set()
    await asyncio.wait_for(run, 20)
    assert _value(app, "zsched_run_duration_seconds_count", task="long") == 1
    await d.close()
    await w.close()
