"""One clock everywhere (issue 18, defect 6; DESIGN.md invariant 3): a worker and an enqueuing
process whose own clocks are an hour fast still report the Redis server's times:
`current_run().scheduled_for`, the start lag, and a retry's due time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zsched
from tests.state import envelope_of
from zsched.protocol.envelope import decode
from zsched.store.delayed import untag

HOUR_S = 3600.0
#: Far below the hour of skew; a loaded host's round trips stay well inside it.
NEAR_S = 60.0


def _server_s(real: Any) -> float:
    sec, usec = real.sync.time()
    return int(sec) + int(usec) / 1e6


async def test_a_worker_whose_clock_is_an_hour_fast_reports_server_times(real, queue,
                                                                        monkeypatch) -> None:  # fmt: skip
    app = real.app(queue)
    seen: list[zsched.RunInfo] = []

    @app.task(name="t")
    def t(payload: Any) -> None:
        seen.append(zsched.current_run())
        if len(seen) == 1:
            raise zsched.Retry(delay=10)

    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + HOUR_S)
    app.enqueue("t", None, delay=0, run_id="r1")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    server = _server_s(real)
    (info,) = seen
    assert abs(info.scheduled_for.timestamp() - server) < NEAR_S
    lag = app.metrics.start_lag.labels(queue, "t")
    assert lag._sum.get() < NEAR_S  # not 3,600 s
    # The retry's envelope says it is due 10 s after the server's now, not the worker's.
    env = decode(envelope_of(real.sync, app.keys, "r1"), "r1")
    assert abs(env.run_at_ms / 1000 - (server + 10)) < NEAR_S
    await d.close()
    await w.close()


async def test_a_retry_buffered_while_a_flush_writes_is_due_from_the_instant_it_is_written(
        real, queue, monkeypatch) -> None:  # fmt: skip
    """Found by make model (issue 18): the writer read the clock once per flush and wrote every
    batch of it with that instant, so a retry buffered while an earlier batch was written,
    after an injected clock moved, was due `delay` after the flush began (the model's run
    started its next attempt 450 s early). Each batch now reads the clock when it is written."""
    t0 = 1_800_000_000_000
    clock = zsched.FakeClock(t0)
    app = real.app(queue, clock=clock)
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}

    @app.task(name="t")
    async def t(payload: Any) -> None:
        run_id = zsched.current_run().run_id
        await gates[run_id].wait()
        if run_id == "b":
            raise zsched.Retry(delay=10)

    app.enqueue("t", None, run_id="a")
    app.enqueue("t", None, run_id="b")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.setup()
    for delivery in await w.reader.read(10, None):  # as tick does, without draining
        w.runner.start(delivery)
    writing, go = asyncio.Event(), asyncio.Event()
    write_acks = w.writer._write_acks

    async def held_acks(acks: Any, now: Any) -> None:
        writing.set()
        await go.wait()
        await write_acks(acks, now)

    monkeypatch.setattr(w.writer, "_write_acks", held_acks)
    gates["a"].set()
    # a's task ends first (b waits for its gate): its ack is buffered.
    await asyncio.wait(list(w.runner.tasks), return_when=asyncio.FIRST_COMPLETED)
    assert len(w.runner.tasks) == 1
    flush = asyncio.create_task(w.flush())
    await writing.wait()  # the flush writes a's ack
    clock.set(t0 + 60_000)
    gates["b"].set()
    await asyncio.gather(*list(w.runner.tasks))  # b's retry is buffered
    go.set()
    await flush
    env = decode(envelope_of(real.sync, app.keys, "b"), "b")
    assert env.run_at_ms == t0 + 60_000 + 10_000
    assert untag(real.sync.hget(app.keys.runs, "b"))[0] == t0 + 70_000
    await d.close()
    await w.close()
