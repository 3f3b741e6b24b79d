"""Outcomes of finished runs: get_run tells done, dead or cancelled with when it finished, and
for keep_result tasks the attempts, the last attempt's duration and the return value (capped,
with a clear error above the cap), kept for the dedupe window."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zsched
from zsched import FakeClock
from zsched.observability.metrics import Metrics
from zsched.runs import outcomes as O


async def run_all(app: zsched.App, backend: Any, passes: int = 1) -> None:
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        for _ in range(passes):
            await d.tick()
            await w.tick()
    finally:
        await d.close()
        await w.close()


async def test_a_done_run_tells_attempts_duration_and_its_return_value(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())

    @app.task(name="add", keep_result=True)
    async def add(payload: Any) -> Any:
        await asyncio.sleep(0.01)
        return {"sum": sum(payload), "parts": payload}

    app.enqueue("add", [1, 2, 3], run_id="a")
    await run_all(app, backend)
    st = app.get_run("a")
    assert (st.state, st.attempts, st.result, st.result_error) == (
        "done", 1, {"sum": 6, "parts": [1, 2, 3]}, None)  # fmt: skip
    assert st.duration_ms is not None and st.duration_ms >= 10
    assert st.finished_at == st.done_at and st.finished_at is not None


async def test_attempts_count_the_retries(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())
    tries = []

    @app.task(name="flaky", keep_result=True, backoff=0)
    def flaky(payload: Any) -> str:
        tries.append(1)
        if len(tries) < 3:
            raise RuntimeError("not yet")
        return "ok"

    app.enqueue("flaky", None, run_id="f")
    await run_all(app, backend, passes=3)
    st = app.get_run("f")
    assert (st.state, st.attempts, st.result) == ("done", 3, "ok")


async def test_a_dead_run_tells_when_and_how_many_attempts(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())

    @app.task(name="bad", keep_result=True, max_attempts=1)
    def bad(payload: Any) -> None:
        raise zsched.Fail("no such invoice")

    app.enqueue("bad", None, run_id="b")
    await run_all(app, backend)
    st = app.get_run("b")
    assert (st.state, st.attempts, st.result) == ("dead", 1, None)
    assert st.finished_at is not None and "no such invoice" in (st.dead_reason or "")


@pytest.mark.parametrize(("value", "needle"), [
    ("x" * 100, "return value is 102 bytes encoded, over the cap of 50 (max_result_bytes)"),
    ({1, 2}, "return value of type set is not msgpack-encodable"),
])  # fmt: skip
async def test_a_value_that_cannot_be_kept_is_a_clear_error_and_the_run_is_done(
    backend, queue, value, needle
) -> None:
    app = backend.app(queue, metrics=Metrics())

    @app.task(name="big", keep_result=True, max_result_bytes=50)
    def big(payload: Any) -> Any:
        return value

    app.enqueue("big", None, run_id="g")
    await run_all(app, backend)
    st = app.get_run("g")
    assert (st.state, st.result) == ("done", None)
    assert st.result_error is not None and needle in st.result_error


async def test_tasks_without_keep_result_record_nothing(backend, queue) -> None:
    app = backend.app(queue, metrics=Metrics())

    @app.task(name="plain")
    def plain(payload: Any) -> int:
        return 42

    app.enqueue("plain", None, run_id="p")
    await run_all(app, backend)
    st = app.get_run("p")
    assert (st.state, st.attempts, st.result) == ("done", None, None)
    assert not backend.sync.exists(app.keys.outcomes, app.keys.outcome_times)


def test_outcomes_older_than_the_window_are_trimmed(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(1_800_000_000_000))
    blob = O.Outcome(1, 5, "r").encode()
    app.scripts.run(O.record(app.keys, [("old", blob)], now_ms=1_000, dedupe_window_ms=100))
    app.scripts.run(O.record(app.keys, [("new", blob)], now_ms=2_000, dedupe_window_ms=100))
    assert backend.sync.hkeys(app.keys.outcomes) == [b"new"]
    assert backend.sync.zrange(app.keys.outcome_times, 0, -1) == [b"new"]
    assert 0 < backend.sync.pttl(app.keys.outcomes) <= 100


def test_record_refuses_bad_input_before_writing(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(Exception, match="run_id is empty"):
        app.scripts.run(O.record(app.keys, [("a", b"x"), ("", b"x")], now_ms=1, dedupe_window_ms=1))
    assert not backend.sync.exists(app.keys.outcomes)
    with pytest.raises(zsched.ZschedError, match="max_result_bytes"):
        app.task(name="t", keep_result=True, max_result_bytes=-1)(lambda p: None)
