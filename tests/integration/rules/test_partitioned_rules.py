"""Rules on a partitioned queue: each rule lives in one partition and fires there."""

from __future__ import annotations

import zsched
from zsched import FakeClock
from zsched.protocol.keys import QueueKeys
from zsched.rules.triggers import slot_run_id

M = 60_000
T0 = 1_800_000_000_000 // M * M


async def test_rules_route_to_their_partition_and_fire_there(real, queue) -> None:
    clock = FakeClock(T0 - 1)
    app = zsched.App(real.sync, queue=queue, partitions=4, clock=clock)
    ids = [f"rule-{i}" for i in range(12)]
    for sid in ids:
        app.schedule(sid, "t", every=60)
    homes = {sid: app.partition_for(sid) for sid in ids}
    assert len(set(homes.values())) > 1  # they spread
    for sid, p in homes.items():
        assert real.sync.hexists(QueueKeys(queue, p).rules, sid)
    assert [i.schedule_id for i in app.schedules()] == sorted(ids)
    d = app.dispatcher()
    clock.set(T0)
    await d.tick()
    for sid, p in homes.items():
        run_id = slot_run_id(sid, T0)
        assert app.run_partition(run_id) == p  # its fires route to the rule's partition
        assert real.sync.hexists(QueueKeys(queue, p).runs, run_id)
    assert app.pause_schedule("rule-3") and app.resume_schedule("rule-3")
    assert [h["outcome"] for h in app.schedule_history("rule-3")] == ["ran"]
    assert all(not r.unaccounted for r in app.audit_schedules())
    app.declare("declared", "t", every=60)
    assert app.sync_schedules()["created"] == ["declared"]
    assert app.sync_schedules()["unchanged"] == ["declared"]
    assert app.unschedule("rule-0")
    await d.close()
