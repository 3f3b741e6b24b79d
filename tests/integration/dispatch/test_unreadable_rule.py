"""A rule this dispatcher cannot read (a corrupt spec, or one a newer zsched wrote) neither
spins the dispatcher nor holds up the other rules: it is reported once (a log line, a gauge),
left stored as it is, and read again when its spec changes."""

from __future__ import annotations

import asyncio
import logging

import msgpack
import pytest

from tests.passes import HOUR_MS, Passes
from zsched import FakeClock
from zsched.cli.main import main
from zsched.errors import RuleError

M = 60_000
T0 = 1_800_000_000_000 // (60 * M) * (60 * M)


def unreadable(raw: bytes) -> bytes:
    d = msgpack.unpackb(raw, raw=False)
    d["trigger"]["kind"] = "bogus"  # what a newer zsched's trigger looks like to this one
    return msgpack.packb(d, use_bin_type=True)


def cannot_read(caplog, sid):
    return [r for r in caplog.records if f"rule {sid} cannot be read" in r.getMessage()]


async def test_an_unreadable_due_rule_is_told_once_and_the_others_fire_on_time(
    backend, queue, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="zsched")
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("good", "t", every=60)
    app.schedule("bad", "t", every=60, misfire="coalesce")
    k, r = app.keys, backend.sync
    valid = r.hget(k.rules, "bad")
    r.hset(k.rules, "bad", unreadable(valid))  # no wake published: a pass must find it
    bad_next = r.zscore(k.rule_next, "bad")
    d = app.dispatcher(redis=backend.async_client())
    firer = d.parts[0]
    reads = []
    pipeline = firer.redis.pipeline

    def counted(*a, **kw):
        reads.append(1)
        return pipeline(*a, **kw)

    firer.redis.pipeline = counted
    gauge = app.metrics.unreadable_rules.labels(queue, "bad")
    for minute in range(1, 11):
        clock.set(int(r.zscore(k.rule_next, "good")))  # good's slot is due
        before = len(reads)
        for _ in range(5):  # passes at one instant: what a loop sleeping 0 would make
            t = await d.tick()
            assert t.next_due_ms is not None and t.next_due_ms > t.now_ms  # the loop sleeps
        assert len(reads) - before <= 3  # this minute's fire, not a read per pass
        assert app.metrics.fires.labels(queue, "good")._value.get() == minute
    assert len(cannot_read(caplog, "bad")) == 1  # once, not every pass
    (line,) = cannot_read(caplog, "bad")
    assert line.levelno == logging.ERROR and "bogus" in line.getMessage()
    assert gauge._value.get() == 1
    # The minute's ledger audit skips it, it does not fail for every rule.
    assert not [x for x in caplog.records if "ledger audit failed" in x.getMessage()]
    # Untouched: maybe a newer zsched wrote it.
    assert (r.hget(k.rules, "bad"), r.zscore(k.rule_next, "bad")) == (unreadable(valid), bad_next)
    assert app.schedule_history("bad") == []
    r.hset(k.rules, "bad", valid)  # rewritten in a form this zsched reads
    firer.invalidate()  # what the wake message of a write does
    await d.tick()
    assert app.metrics.fires.labels(queue, "bad")._value.get() == 1
    assert gauge._value.get() == 0
    assert r.zscore(k.rule_next, "bad") > clock.now_ms()
    assert len(cannot_read(caplog, "bad")) == 1
    await d.close()


async def test_an_unreadable_rule_is_told_again_only_when_its_spec_changes(
    backend, queue, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="zsched")
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("bad", "t", every=60)
    k, r = app.keys, backend.sync
    valid = r.hget(k.rules, "bad")
    r.hset(k.rules, "bad", unreadable(valid))
    clock.set(T0 + 10 * M)
    d = app.dispatcher(redis=backend.async_client())
    t = await d.tick()
    assert t.next_due_ms is None  # nothing it can fire: an idle poll, not a spin
    d.parts[0].invalidate()  # any wake (a run enqueued): the same spec is not told again
    await d.tick()
    assert len(cannot_read(caplog, "bad")) == 1
    r.hset(k.rules, "bad", b"\xc1 not msgpack")  # changed, still unreadable: told again
    d.parts[0].invalidate()
    await d.tick()
    assert len(cannot_read(caplog, "bad")) == 2
    r.hdel(k.rules, "bad")
    r.zrem(k.rule_next, "bad")  # removed: forgotten, the gauge back to 0
    d.parts[0].invalidate()
    await d.tick()
    assert app.metrics.unreadable_rules.labels(queue, "bad")._value.get() == 0
    await d.close()


async def test_a_running_dispatcher_sleeps_past_an_unreadable_rule_until_it_is_rewritten(
    real, queue
) -> None:
    """The run loop: after the first pass, the next comes from the wake of the rewrite, not
    from a timer of 0 (before the fix every pass came at once, each logging the rule)."""
    clock = FakeClock(T0 + 90_000)
    app = real.app(queue, clock=clock)
    k, r = app.keys, real.sync
    app.schedule("good", "t", every=60)
    app.schedule("bad", "t", every=60, misfire="coalesce")
    valid = r.hget(k.rules, "bad")
    clock.set(T0 + 150_000)  # both due
    r.hset(k.rules, "bad", unreadable(valid))
    d = app.dispatcher(redis=real.async_client(), max_idle_ms=HOUR_MS)
    passes = Passes(d)
    stop = asyncio.Event()
    run = asyncio.create_task(d.run(stop))
    try:
        first = await passes.next()
        assert first.next_due_ms is not None and first.next_due_ms > clock.now_ms()
        assert app.metrics.fires.labels(queue, "good")._value.get() == 1
        r.hset(k.rules, "bad", valid)
        r.publish(k.wake, "rule")  # what schedule.lua does for a write
        woken = await passes.until(lambda: app.metrics.fires.labels(queue, "bad")._value.get() == 1)
        assert woken.wakeups >= 1 and passes.seen <= 3
    finally:
        stop.set()
        await asyncio.wait_for(run, 10)
        await d.close()


def test_an_unreadable_rule_is_listed_audited_and_not_overwritten(backend, queue, capsys):
    app = backend.app(queue, clock=FakeClock(T0))
    app.schedule("good", "t", every=60)
    app.schedule("bad", "t", every=60)
    k, r = app.keys, backend.sync
    broken = unreadable(r.hget(k.rules, "bad"))
    r.hset(k.rules, "bad", broken)
    bad, good = sorted(app.schedules(), key=lambda i: i.schedule_id)
    assert (good.unreadable, good.task) == (None, "t")
    assert bad.task == "?" and "bogus" in bad.unreadable
    assert bad.next_fire_ms == r.zscore(k.rule_next, "bad")
    results = {a.schedule_id: a for a in app.audit_schedules()}
    assert results["good"].unreadable is None and "bogus" in results["bad"].unreadable
    with pytest.raises(RuleError, match="schedule bad cannot be edited: .*bogus"):
        app.schedule("bad", "t", every=30)
    assert r.hget(k.rules, "bad") == broken  # nothing lost
    if backend.name == "redis":  # the CLI connects by URL
        main(["schedules", "list", "--redis", backend.url, "--queue", queue])
        assert "UNREADABLE, does not fire until rewritten" in capsys.readouterr().out
    assert app.unschedule("bad")  # removing it needs no reading


def test_a_declared_rule_stored_unreadable_is_kept_and_the_others_synced(backend, queue, caplog):
    """The sync a dispatcher runs at start (the same sync_declared): before, it raised, and
    the dispatcher retried it forever without dispatching anything."""
    caplog.set_level(logging.WARNING, logger="zsched")
    app = backend.app(queue, clock=FakeClock(T0))
    app.declare("bad", "t", every=60)
    app.declare("good", "t", every=60)
    app.sync_schedules()
    k, r = app.keys, backend.sync
    broken = unreadable(r.hget(k.rules, "bad"))
    r.hset(k.rules, "bad", broken)
    app.declare("good", "t", every=120)
    result = app.sync_schedules()
    assert (result["unreadable"], result["updated"]) == (["bad"], ["good"])
    assert r.hget(k.rules, "bad") == broken
    (line,) = [x for x in caplog.records if "schedule bad cannot be edited" in x.getMessage()]
    assert line.levelno == logging.ERROR and "bogus" in line.getMessage()
