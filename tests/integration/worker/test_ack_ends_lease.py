"""A worker killed right after it acknowledged a rule's run leaves no lease behind (issue 18).

The ack used to be followed by a second script, unlease, that freed the rule's overlap lease
and started the fire waiting for it. A worker dying between the two left the lease with a
finished run and the queued fire waiting until the rule's next fire (up to an interval late).
Now the ack ends the lease itself: nothing the worker sends after it matters.
"""

from __future__ import annotations

import contextlib

import redis

from zsched import FakeClock, ManualOutcome

T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000


class _Died(redis.exceptions.ConnectionError):
    """Every script call after the ack: the worker is gone."""


async def test_a_worker_dead_right_after_its_ack_leaves_no_lease_and_starts_the_waiting_fire(
    backend, queue, monkeypatch
) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.task(name="t")(lambda payload: None)
    app.schedule("q", "t", every=3600, overlap="queue")
    holder = app.run_schedule_now("q")
    clock.set(T0 + 5)
    waiting = app.run_schedule_now("q")
    assert waiting.outcome is ManualOutcome.QUEUED
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    scripts, names = w.scripts, []
    real_run = scripts.run

    async def run(call):
        if "ack" in names:
            raise _Died(f"{call.name} after the ack: the worker died")
        names.append(call.name)
        return await real_run(call)

    monkeypatch.setattr(scripts, "run", run)
    try:
        await d.tick()
        with contextlib.suppress(_Died):  # the unlease call of a worker before the fix
            await w.tick()
        assert "ack" in names
        k, r = app.keys, backend.sync
        assert app.get_run(holder.run_id).state == "done"
        assert r.get(k.lease("q")) == waiting.run_id.encode()
        assert not r.hexists(k.rule_waiting, "q")
        assert app.get_run(waiting.run_id).state == "scheduled"  # due now, the lease its own
    finally:
        await d.close()
        await w.close()
