"""A resent outcome whose first call was applied is not a fence (issue 25).

At high load an ack call's reply timed out in redis-py although Redis had applied it; the
writer kept the outcomes and sent them again, ack.lua refused every one, and the worker logged
a WARNING per run and counted each as fenced and as a duplicate execution though nothing ran
twice. Now the scripts answer GONE (no longer pending) apart from FENCED (pending with another
consumer), and only a resend may read GONE as "written by the lost call". A first send that
finds GONE (a thief reclaimed the entry and finished the run first) is still a fence.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from zsched.protocol.keys import GROUP
from zsched.store import scripts as S


def _counts(app: Any, queue: str, what: str = "ack") -> tuple[float, float, float]:
    m = app.metrics
    return (m.fenced.labels(queue, what)._value.get(),
            m.duplicates.labels(queue, "worker")._value.get(),
            m.resent_written.labels(queue, what)._value.get())  # fmt: skip


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_ack_applied_but_whose_reply_timed_out_is_not_fenced_on_resend(
    backend, queue, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="zsched")
    app = backend.app(queue)
    ran: list[int] = []
    app.task(name="t")(ran.append)
    app.enqueue_many([("t", i) for i in range(30)])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    real_run, lost = w.scripts.run, []

    async def reply_lost(call: Any) -> Any:
        reply = await real_run(call)
        if call.name == "ack" and not lost:  # applied by Redis, the reply never arrives
            lost.append(reply)
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return reply

    w.scripts.run = reply_lost
    try:
        await d.tick()
        with pytest.raises(redis.exceptions.TimeoutError):
            await w.tick()
        assert app.status().pending == 0  # the first call was applied
        # A hold renewal before the resend finds the entries gone: not lost, not fenced (the
        # resend judges them).
        assert await w.holds.renew() == 0
        await w.flush()  # the writer kept the outcomes and sends them again
    finally:
        await d.close()
        await w.close()
    assert sorted(ran) == list(range(30))
    assert _counts(app, queue) == (0, 0, 30)
    assert app.metrics.fenced.labels(queue, "renew")._value.get() == 0
    stats = app.status().stats
    # gone: the 30 renewals and the 30 resends refused because the entries were acked
    assert (stats.get("acked"), stats.get("gone"), stats.get("fenced", 0)) == (30, 60, 0)
    assert _warnings(caplog) == [], _warnings(caplog)
    infos = [r.getMessage() for r in caplog.records if "found written already" in r.getMessage()]
    assert len(infos) == 1 and "ack of 30 run(s)" in infos[0], infos


async def test_a_real_fence_still_counts_once_per_run_in_one_warning(
    backend, queue, caplog
) -> None:
    """A thief reclaims two entries while their handlers run: it finishes one (the worker's
    first send finds it GONE), the other it still holds (FENCED). Both ran twice."""
    caplog.set_level(logging.INFO, logger="zsched")
    app = backend.app(queue)
    k, r = app.keys, backend.sync

    def steal(run_id: str) -> None:
        entry = r.hget(k.runs, run_id).decode()  # on the stream: its entry id
        r.xclaim(k.ready, GROUP, "thief", 0, [entry])
        if run_id == "finished-by-thief":
            call = S.ack(k, "thief", [(entry, run_id)], now_ms=None, dedupe_window_ms=60_000)
            assert app.scripts.run(call) == [1]

    @app.task(name="t")
    def t(run_id: str) -> None:
        if run_id != "mine":
            steal(run_id)

    for run_id in ("finished-by-thief", "held-by-thief", "mine"):
        app.enqueue("t", run_id, run_id=run_id)
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        await d.tick()
        assert await w.tick() == 3
    finally:
        await d.close()
        await w.close()
    assert _counts(app, queue) == (2, 2, 0)
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "ack of 2 run(s) refused" in warnings[0]
    assert "finished-by-thief" in warnings[0] and "held-by-thief" in warnings[0]
    stats = app.status().stats
    assert (stats.get("fenced"), stats.get("gone")) == (1, 1)
    assert app.get_run("mine").state == "done"
    assert app.get_run("held-by-thief").state == "running"


async def test_a_resend_that_finds_the_entry_held_by_another_consumer_is_a_fence(
    backend, queue, caplog
) -> None:
    """The first call failed without being applied, and meanwhile another consumer took the
    entry: the resend finds it FENCED, a fence even on a resend."""
    caplog.set_level(logging.INFO, logger="zsched")
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    app.task(name="t")(lambda p: None)
    app.enqueue("t", None, run_id="a")
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    real_run, failed = w.scripts.run, []

    async def not_sent(call: Any) -> Any:
        if call.name == "ack" and not failed:
            failed.append(call)
            r.xclaim(k.ready, GROUP, "thief", 0, [r.hget(k.runs, "a").decode()])
            raise redis.exceptions.ConnectionError("lost before it was sent")
        return await real_run(call)

    w.scripts.run = not_sent
    try:
        await d.tick()
        with pytest.raises(redis.exceptions.ConnectionError):
            await w.tick()
        await w.flush()
    finally:
        await d.close()
        await w.close()
    assert _counts(app, queue) == (1, 1, 0)
    assert len(_warnings(caplog)) == 1


async def test_a_dead_letter_whose_reply_was_lost_still_frees_its_rules_lease(backend, queue):
    """dead.lua applied, its reply lost: the call freed the rule's overlap lease itself (issue
    18: before, a second call after the reply did, and a fence read from the resend's GONE
    left the lease with a dead run); the resend (GONE) is counted as written, not a fence."""
    import zsched
    from zsched import FakeClock

    app = backend.app(queue, clock=FakeClock(1_800_000_000_000))

    @app.task(name="sweep")
    def sweep(payload: object) -> None:
        raise zsched.Fail("boom")

    app.schedule("sweep", "sweep", every=3600, overlap="skip")
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    real_run, lost = w.scripts.run, []

    async def reply_lost(call: Any) -> Any:
        reply = await real_run(call)
        if call.name == "dead" and not lost:
            lost.append(reply)
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return reply

    w.scripts.run = reply_lost
    lease = app.keys.lease("sweep")
    try:
        await d.tick()
        assert backend.sync.get(lease) is not None  # the slot's run holds the lease
        with pytest.raises(redis.exceptions.TimeoutError):
            await w.tick()
        assert len(app.dead_letters()) == 1 and backend.sync.get(lease) is None
        await w.flush()
    finally:
        await d.close()
        await w.close()
    assert backend.sync.get(lease) is None
    assert _counts(app, queue, "dead") == (0, 0, 1)
    assert len(app.dead_letters()) == 1
