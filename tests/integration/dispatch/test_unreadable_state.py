"""A rule whose stored spec reads but whose stored *state* is corrupt is set aside like a rule
whose spec cannot be read (test_unreadable_rule.py): told once, the gauge, left as stored, the
other rules fire on time; read again once its state (or spec) is rewritten. Before, the
dispatcher decoded the state outside that handling and the whole pass failed."""

from __future__ import annotations

import logging

import msgpack
import pytest

from zsched import FakeClock
from zsched.rules.spec import State

M = 60_000
T0 = 1_800_000_000_000 // (60 * M) * (60 * M)
#: Corrupt states: not msgpack, not a map, a field of the wrong type.
CORRUPT = [b"\xc1 not msgpack", msgpack.packb([1, 2]), msgpack.packb({"backlog": "x"})]


def cannot_read(caplog, sid):
    return [r for r in caplog.records if f"rule {sid} cannot be read" in r.getMessage()]


@pytest.mark.parametrize("corrupt", CORRUPT, ids=["not-msgpack", "not-a-map", "bad-field"])
async def test_a_corrupt_rule_state_is_set_aside_and_the_others_fire_on_time(
    backend, queue, caplog, corrupt
) -> None:
    caplog.set_level(logging.WARNING, logger="zsched")
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("good", "t", every=60)
    app.schedule("bad", "t", every=60, misfire="coalesce")
    k, r = app.keys, backend.sync
    valid = r.hget(k.rule_state, "bad")
    r.hset(k.rule_state, "bad", corrupt)
    bad_next = r.zscore(k.rule_next, "bad")
    d = app.dispatcher(redis=backend.async_client())
    gauge = app.metrics.unreadable_rules.labels(queue, "bad")
    for minute in range(1, 4):
        clock.set(int(r.zscore(k.rule_next, "good")))
        for _ in range(3):
            t = await d.tick()
            assert t.next_due_ms is not None and t.next_due_ms > t.now_ms  # no spin
        assert app.metrics.fires.labels(queue, "good")._value.get() == minute
    (line,) = cannot_read(caplog, "bad")  # once, not every pass
    assert line.levelno == logging.ERROR and "state" in line.getMessage()
    assert gauge._value.get() == 1
    assert not [x for x in caplog.records if "ledger audit failed" in x.getMessage()]
    assert (r.hget(k.rule_state, "bad"), r.zscore(k.rule_next, "bad")) == (corrupt, bad_next)
    # Listed and audited as unreadable, the other rule as usual.
    infos = {i.schedule_id: i for i in app.schedules()}
    assert infos["good"].unreadable is None and "state" in infos["bad"].unreadable
    audits = {a.schedule_id: a for a in app.audit_schedules()}
    assert audits["good"].unreadable is None and "state" in audits["bad"].unreadable
    r.hset(k.rule_state, "bad", valid)  # its state rewritten, its spec as it was
    d.parts[0].invalidate()
    await d.tick()
    assert app.metrics.fires.labels(queue, "bad")._value.get() == 1
    assert gauge._value.get() == 0
    await d.close()


async def test_an_unreadable_spec_is_not_told_again_when_a_newer_zsched_fires_it(
    backend, queue, caplog
) -> None:
    """A rolling upgrade: the newer dispatchers fire the rule, changing its state at every
    fire; this one watches the state only of a rule whose state is what it cannot read."""
    caplog.set_level(logging.WARNING, logger="zsched")
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("bad", "t", every=60)
    k, r = app.keys, backend.sync
    d = msgpack.unpackb(r.hget(k.rules, "bad"), raw=False)
    d["trigger"]["kind"] = "bogus"
    r.hset(k.rules, "bad", msgpack.packb(d, use_bin_type=True))
    clock.set(T0 + 10 * M)
    dispatcher = app.dispatcher(redis=backend.async_client())
    await dispatcher.tick()
    for fired in range(1, 4):  # what a newer dispatcher's fires write
        r.hset(k.rule_state, "bad", State(fired=fired).encode())
        dispatcher.parts[0].invalidate()
        await dispatcher.tick()
    assert len(cannot_read(caplog, "bad")) == 1
    await dispatcher.close()
