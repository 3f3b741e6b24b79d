"""A flush cancelled mid-call keeps its outcomes (found by hcap, issue 18's review): the
shutdown cancels the flush loop, and before this the batch it had taken off the buffer was
dropped, so the shutdown's hand-back released a run that had succeeded, to run again with no
duplicate counted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import zsched

pytestmark = pytest.mark.asyncio


async def test_a_flush_cancelled_mid_call_keeps_the_ack_and_writes_it_later(
    real, queue, monkeypatch
) -> None:
    app = zsched.App(real.url, queue=queue)
    ran: list[str] = []

    @app.task(name="t")
    async def t(payload: Any) -> None:
        ran.append(zsched.current_run().run_id)

    app.enqueue("t", None, run_id="a")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.setup()
    (delivery,) = await w.reader.read(10, None)
    w.runner.start(delivery)
    await asyncio.gather(*list(w.runner.tasks))
    assert w.writer.has_outcome(delivery.entry_id)  # a's ack is buffered

    sending = asyncio.Event()
    run_script = w.writer.ctx.scripts.run

    async def held(call: Any) -> Any:
        if call.name == "ack":
            sending.set()
            await asyncio.Event().wait()  # never returns: cancelled
        return await run_script(call)

    monkeypatch.setattr(w.writer.ctx.scripts, "run", held)
    flush = asyncio.create_task(w.flush())
    await sending.wait()
    flush.cancel()
    await asyncio.gather(flush, return_exceptions=True)
    # Kept, and marked a resend (the call may have reached Redis before the cancel).
    assert w.writer.has_outcome(delivery.entry_id)
    assert delivery.entry_id in w.writer.resent
    monkeypatch.setattr(w.writer.ctx.scripts, "run", run_script)
    await w.flush()
    await w.holds.hand_back()
    assert real.sync.hget(app.keys.runs, "a") is None  # done, not handed back to run again
    assert int(real.sync.hget(app.keys.stats, "acked") or 0) == 1
    assert ran == ["a"]
    await d.close()
    await w.close()
