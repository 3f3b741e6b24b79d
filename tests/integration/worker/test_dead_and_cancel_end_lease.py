"""A process killed right after a rule run's dead letter or cancel leaves no lease behind
(issue 18), as after its ack (test_ack_ends_lease.py).

The worker's dead letter, and App.cancel's revoke, used to be followed by a second script,
unlease, that freed the rule's overlap lease and started the fire waiting for it. A process
dying between the two left the lease with a run that no longer lived and the queued fire
waiting until the rule's next fire (up to an interval late). Now the one call ends the lease.
"""

from __future__ import annotations

import contextlib
import inspect

import redis

from zsched import AsyncApp, Fail, FakeClock, ManualOutcome

T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000


class _Died(redis.exceptions.ConnectionError):
    """Every script call after the one watched: the process is gone."""


def _die_after(monkeypatch, scripts, last: str, names: list[str]) -> None:
    """Calls of `scripts` after the first call of script `last` raise: the process died."""
    real_run = scripts.run

    def guard(call):
        if last in names:
            raise _Died(f"{call.name} after {last}: the process died")
        names.append(call.name)

    async def run_async(call):
        guard(call)
        return await real_run(call)

    def run_sync(call):
        guard(call)
        return real_run(call)

    monkeypatch.setattr(
        scripts, "run", run_async if inspect.iscoroutinefunction(real_run) else run_sync
    )


def _queued_rule(backend, queue, clock):
    """Rule q (overlap queue): a manual fire holding the lease, a second one waiting."""
    app = backend.app(queue, clock=clock)
    app.schedule("q", "t", every=3600, overlap="queue")
    holder = app.run_schedule_now("q")
    clock.set(T0 + 5)
    waiting = app.run_schedule_now("q")
    assert waiting.outcome is ManualOutcome.QUEUED
    return app, holder, waiting


def _started(backend, app, waiting) -> bool:
    k, r = app.keys, backend.sync
    return (r.get(k.lease("q")) == waiting.run_id.encode() and not r.hexists(k.rule_waiting, "q")
            and app.get_run(waiting.run_id).state == "scheduled")  # fmt: skip


async def test_a_worker_dead_right_after_a_dead_letter_leaves_no_lease_and_starts_the_waiting_fire(
    backend, queue, monkeypatch
) -> None:
    clock = FakeClock(T0)
    app, holder, waiting = _queued_rule(backend, queue, clock)

    def fail(payload):
        raise Fail("boom")

    app.task(name="t")(fail)
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    names: list[str] = []
    _die_after(monkeypatch, w.scripts, "dead", names)
    try:
        await d.tick()
        with contextlib.suppress(_Died):  # the unlease call of a worker before the fix
            await w.tick()
        assert "dead" in names
        assert app.get_run(holder.run_id).state == "dead"
        assert _started(backend, app, waiting)
    finally:
        await d.close()
        await w.close()


def test_a_client_dead_right_after_cancelling_a_rule_run_leaves_no_lease(
    backend, queue, monkeypatch
) -> None:
    clock = FakeClock(T0)
    app, holder, waiting = _queued_rule(backend, queue, clock)
    names: list[str] = []
    _die_after(monkeypatch, app.scripts, "revoke", names)
    with contextlib.suppress(_Died):  # the unlease call of a client before the fix
        assert app.cancel(holder.run_id).cancelled
    assert names == ["revoke"]
    assert app.get_run(holder.run_id).state == "cancelled"
    assert _started(backend, app, waiting)


async def test_an_async_client_cancelling_a_rule_run_ends_its_lease_in_one_call(
    backend, queue, monkeypatch
) -> None:
    clock = FakeClock(T0)
    app, holder, waiting = _queued_rule(backend, queue, clock)
    aio = AsyncApp.from_app(app, redis=backend.async_client())
    names: list[str] = []
    _die_after(monkeypatch, aio.scripts, "revoke", names)
    try:
        with contextlib.suppress(_Died):  # the unlease call of a client before the fix
            assert (await aio.cancel(holder.run_id)).cancelled
    finally:
        await aio.redis.aclose()
    assert names == ["revoke"]
    assert _started(backend, app, waiting)


async def test_the_dead_letter_of_a_rule_run_with_an_undecodable_envelope_ends_its_lease(
    backend, queue
) -> None:
    """No envelope to read `lease_ms` from: the worker passes the lease its run id names
    (`<schedule_id>@...`). Before, it passed none, and the waiting fire waited for the rule's
    next fire."""
    clock = FakeClock(T0)
    app, holder, waiting = _queued_rule(backend, queue, clock)
    app.task(name="t")(lambda payload: None)
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        await d.tick()
        # The holder's entry as a newer client might write it: an envelope this worker cannot
        # read (the same run, its entry id recorded as dispatch.lua does).
        k, r = app.keys, backend.sync
        ((entry, _),) = r.xrange(k.ready)
        r.xdel(k.ready, entry)
        new = r.xadd(k.ready, {"run_id": holder.run_id, "envelope": b"\xc1 not msgpack"})
        r.hset(k.runs, holder.run_id, new)
        await w.tick()
        (letter,) = app.dead_letters()
        assert letter.run_id == holder.run_id and letter.reason.startswith("undecodable envelope")
        assert _started(backend, app, waiting)
    finally:
        await d.close()
        await w.close()
