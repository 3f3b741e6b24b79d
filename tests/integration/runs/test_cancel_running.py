"""Cooperative cancel of a running run: the worker hears the request within its hold renewal
interval, cancels an async handler's task or tells a sync handler through
`current_run().cancel_requested`; the run ends `cancelled`, a rule's overlap lease is freed,
and a request made while the holder was dead reaches the worker that reclaims the run."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import zsched
from zsched import CancelOutcome, current_run
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import GROUP

#: Hold renewal (and so the cancel check) every 200 ms.
FAST = {"visibility_timeout_ms": 600, "block_ms": 100}


async def until(cond: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def processes(app: zsched.App, backend: Any, **worker: Any) -> AsyncIterator[Any]:
    stop = asyncio.Event()
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client(), **{**FAST, **worker})
    tasks = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    try:
        yield w
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await d.close()
        await w.close()


async def test_an_async_handler_is_cancelled_and_the_run_ends_cancelled(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())
    started, seen = asyncio.Event(), []

    @app.task(name="hang")
    async def hang(payload: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    app.enqueue("hang", None, run_id="h")
    async with processes(app, backend):
        await asyncio.wait_for(started.wait(), 30)
        res = app.cancel("h")
        assert (res.outcome, res.requested) == (CancelOutcome.REQUESTED, True)
        await until(lambda: app.get_run("h").state == "cancelled", "the run to end cancelled")
    assert seen == ["cancelled"]
    st = app.get_run("h")
    assert st.cancelled_at is not None
    assert backend.sync.xpending(app.keys.ready, GROUP)["pending"] == 0
    assert not backend.sync.hexists(app.keys.runs, "h")
    get = app.metrics.registry.get_sample_value
    assert get("zsched_runs_completed_total", {"queue": queue, "task": "hang",
                                               "outcome": "cancelled"}) == 1  # fmt: skip


async def test_a_sync_handler_sees_cancel_requested_and_stops(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())
    started, checks = threading.Event(), []

    @app.task(name="loop", keep_result=True)
    def loop(payload: Any) -> str:
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if current_run().cancel_requested:
                checks.append("stopped")
                return "stopped early"
            time.sleep(0.01)
        return "ran out"

    app.enqueue("loop", None, run_id="s")
    async with processes(app, backend):
        await until(started.is_set, "the handler to start")
        assert not app.get_run("s").cancel_requested
        assert app.cancel("s").requested
        await until(lambda: app.get_run("s").state == "cancelled", "the run to end cancelled")
        # The kept outcome is written one call after the run ends (record.lua after
        # discard.lua: zsched/worker/worker.py _record), so it is awaited, not assumed.
        await until(lambda: app.get_run("s").attempts is not None, "the kept outcome")
    assert checks == ["stopped"]
    st = app.get_run("s")  # keep_result: the outcome is kept for a cancelled run too
    assert (st.state, st.attempts, st.result) == ("cancelled", 1, "stopped early")


async def test_a_cancelled_rule_run_frees_the_overlap_lease(real, queue) -> None:
    app = real.app(queue, metrics=Metrics())
    ids: list[str] = []

    @app.task(name="report")
    async def report(payload: Any) -> None:
        ids.append(current_run().run_id)
        await asyncio.sleep(3600)

    app.schedule("nightly", "report", every=1, overlap="skip")
    async with processes(app, real):
        await until(lambda: ids, "the rule's first fire to start")
        lease = app.keys.lease("nightly")
        assert real.sync.get(lease) == ids[0].encode()
        assert app.cancel(ids[0]).requested
        await until(lambda: app.get_run(ids[0]).state == "cancelled", "the fire to end")
        # Freed: the next slot's fire may take it at once, as its own run.
        await until(lambda: real.sync.get(lease) != ids[0].encode(), "the lease to be freed")
        assert real.sync.hget(app.keys.stats, "cancelled") == b"1"


async def test_cancelling_a_delayed_rule_fire_frees_its_lease(real, queue) -> None:
    app = real.app(queue, metrics=Metrics())

    @app.task(name="report")
    async def report(payload: Any) -> None:
        raise zsched.Retry(delay=3600)  # back to the delayed set, the lease still held

    app.schedule("nightly", "report", every=1, overlap="skip")
    async with processes(app, real) as w:
        await until(lambda: real.sync.hget(app.keys.stats, "retried"), "the retry")
        run_id = real.sync.get(app.keys.lease("nightly")).decode()
        assert w.running == {}
    res = app.cancel(run_id)
    assert res.outcome is CancelOutcome.CANCELLED_DELAYED
    assert not real.sync.exists(app.keys.lease("nightly"))


async def test_a_request_made_while_the_holder_is_dead_reaches_the_rescuer(backend, queue):
    app = backend.app(queue, metrics=Metrics())
    started = asyncio.Event()

    @app.task(name="hang")
    async def hang(payload: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    app.enqueue("hang", None, run_id="z")
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    await d.close()
    backend.sync.xgroup_create(app.keys.ready, GROUP, id="0", mkstream=True)
    # A worker read it and died (SIGKILL: nothing renews, nothing is acked).
    assert backend.sync.xreadgroup(GROUP, "dead-worker", {app.keys.ready: ">"}, count=1)
    assert app.cancel("z").outcome is CancelOutcome.REQUESTED
    async with processes(app, backend):
        await asyncio.wait_for(started.wait(), 30)  # reclaimed after the visibility timeout
        await until(lambda: app.get_run("z").state == "cancelled", "the rescuer to cancel it")
