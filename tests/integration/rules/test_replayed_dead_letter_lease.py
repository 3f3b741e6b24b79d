"""docs/policies.md, "Where misfire and overlap meet": a replayed dead letter of a rule's run
holds no overlap lease, like a backfill. The rule gave that run up (its lease ended at dead
and may belong to a later slot's run by now); the replay is an operator's re-run of a past
slot, so overlap does not apply to it: it runs beside the rule's live run, leaves that run's
lease alone, and the rule's next slot is not judged against it."""

from __future__ import annotations

from typing import Any

import zsched
from tests.integration.rules.test_policy_bullets import _outcomes
from tests.integration.rules.test_schedules import T0, M
from zsched import FakeClock
from zsched.rules.triggers import slot_run_id


async def test_a_replayed_dead_letter_of_a_rule_run_takes_no_lease(real: Any, queue: str) -> None:
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    broken = [True]
    started: list[str] = []

    @app.task(name="sweep", max_attempts=1)
    def sweep(payload: Any) -> None:
        started.append(zsched.current_run().run_id)
        if broken[0]:
            raise RuntimeError("broken")

    app.schedule("s", "sweep", every=60, overlap="skip")
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    r0, r1, r2, r3 = (slot_run_id("s", T0 + i * M) for i in range(4))
    lease = app.keys.lease("s")
    for i in (0, 1):  # each slot's only attempt fails: dead, its lease ends
        clock.set(T0 + i * M)
        await d.tick()
        await w.tick()
    dead = {x.run_id: x.entry_id for x in app.dead_letters()}
    assert sorted(dead) == [r0, r1] and not real.sync.exists(lease)
    broken[0] = False
    clock.set(T0 + 2 * M)
    await d.tick()  # r2 takes the lease; no worker has read it yet
    assert app.replay_dead([dead[r0]])["replayed"] == 1
    assert real.sync.get(lease) == r2.encode()  # the live run's lease, untouched
    await d.tick()  # the replay is due now: ready beside the live run
    while await w.tick():
        pass
    assert sorted(started[2:]) == sorted([r0, r2]) and not real.sync.exists(lease)
    assert app.replay_dead([dead[r1]])["replayed"] == 1
    assert not real.sync.exists(lease)  # nobody's lease: the replay takes none
    clock.set(T0 + 3 * M)
    await d.tick()  # the replay of r1 goes to ready and slot 3 fires: not judged against it
    assert real.sync.get(lease) == r3.encode()
    while await w.tick():
        pass
    assert sorted(started[4:]) == sorted([r1, r3]) and app.dead_letters() == []
    assert _outcomes(app, "s") == [(T0 + i * M, "ran", "") for i in range(4)]
    await d.close()
    await w.close()
