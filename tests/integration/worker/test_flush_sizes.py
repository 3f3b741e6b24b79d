"""How many outcomes one script call writes (issue 25, session 20).

Acks go out ACK_BATCH (200) a call: against 100 a call, 5 calls instead of 10 per 1,000 runs
(BENCHMARKS.md, session 20). Retries carry envelopes and
re-add their runs to the delayed set, so they stay at FLUSH_BATCH (100) a call, which keeps
each script call short (the issue's 5 ms bound).
"""

from __future__ import annotations

from typing import Any

import zsched
from zsched.worker.writer import ACK_BATCH, FLUSH_BATCH


def _record_calls(w: Any) -> list[tuple[str, int]]:
    """(script, outcomes) of every outcome call the worker's writer sends."""
    calls: list[tuple[str, int]] = []
    real_send = w.writer._send

    async def send(call: Any, items: list[Any]) -> Any:
        calls.append((call.name, len(items)))
        return await real_send(call, items)

    w.writer._send = send
    return calls


async def _one_pass(backend: Any, app: Any, task: str, n: int) -> list[tuple[str, int]]:
    """Enqueue n runs of `task`, dispatch them all, and let a worker of 1,000 slots read, run
    and write them in one pass; the outcome calls it sent."""
    app.enqueue_many([(task, i) for i in range(n)])
    d = app.dispatcher(redis=backend.async_client(), batch_size=1000)
    w = app.worker(redis=backend.async_client(), concurrency=1000, read_batch=1000)
    calls = _record_calls(w)
    try:
        while (await d.tick()).moved:
            pass
        assert await w.tick() == n
    finally:
        await d.close()
        await w.close()
    return calls


async def test_acks_go_out_ack_batch_a_call(backend, queue) -> None:
    assert (ACK_BATCH, FLUSH_BATCH) == (200, 100)
    app = backend.app(queue)
    ran: list[int] = []
    app.task(name="t")(ran.append)
    calls = await _one_pass(backend, app, "t", 500)
    assert sorted(ran) == list(range(500))
    assert calls == [("ack", 200), ("ack", 200), ("ack", 100)]
    status = app.status()
    assert (status.pending, status.stats.get("acked")) == (0, 500)


async def test_retries_stay_at_flush_batch_a_call(backend, queue) -> None:
    app = backend.app(queue)

    @app.task(name="again")
    def again(_payload: Any) -> None:
        raise zsched.Retry(delay=3600)

    calls = await _one_pass(backend, app, "again", 150)
    assert calls == [("retry", 100), ("retry", 50)]
    status = app.status()
    assert (status.pending, status.delayed) == (0, 150)
