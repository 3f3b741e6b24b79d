"""A rule's trigger history: after an edit of its trigger the audit still checks the old
trigger's slots from before the edit, each trigger over its own span (issue 18, "after the
system is quiet, the audit finds nothing unaccounted for")."""

from __future__ import annotations

import pytest

from zsched import FakeClock
from zsched.dispatch.simulate import Driver
from zsched.rules import past_triggers
from zsched.rules.audit import audit
from zsched.rules.triggers import Cron, Every

H = 3_600_000
M = 60_000
T0 = 1_800_000_000_000 // H * H  # an hour boundary

#: (the rule's options before the edit, after it)
EDITS = {
    "cron": ({"cron": "*/15 * * * *", "tz": "UTC"}, {"cron": "10,25,40,55 * * * *", "tz": "UTC"}),
    "every": ({"every": 900}, {"every": 600}),
}


async def _edited(backend, queue, kind):
    """The rule fired by a dispatcher for two hours, edited at T0 + 2:05, fired on to 3:30."""
    before, after = EDITS[kind]
    clock = FakeClock(T0 - 1)
    app = backend.app(queue, clock=clock)
    drv = Driver(app, backend.async_client(), clock, None)
    app.schedule("r", "t", **before)
    await drv.run_until(T0, T0 + 2 * H)
    clock.set(T0 + 2 * H + 5 * M)
    _edit(drv, app, **after)
    await drv.run_until(T0 + 2 * H + 5 * M, T0 + 3 * H + 30 * M)
    await drv.close()
    return app


def _edit(drv, app, **options):
    app.schedule("r", "t", **options)
    for part in drv.dispatcher.parts:  # what the edit's wake message does (test_rule_ops_wake)
        part.invalidate()


def _drop_outcome(backend, app, slot_ms):
    """Lose the ledger entry of one slot (what a dispatcher that never recorded it leaves)."""
    key = app.keys.ledger("r")
    ids = [eid for eid, f in backend.sync.xrange(key) if int(f[b"slot_ms"]) == slot_ms]
    assert len(ids) == 1
    backend.sync.xdel(key, *ids)


@pytest.mark.parametrize("kind", sorted(EDITS))
async def test_the_audit_finds_an_old_triggers_slot_without_outcome_from_before_the_edit(
    backend, queue, kind
) -> None:
    app = await _edited(backend, queue, kind)
    _drop_outcome(backend, app, T0 + H)  # a slot of the old trigger, before the edit
    (report,) = audit(app, now_ms=T0 + 3 * H + 30 * M)
    assert report.unaccounted == [T0 + H]


@pytest.mark.parametrize("kind", sorted(EDITS))
async def test_the_audit_checks_both_triggers_and_finds_nothing_when_all_is_recorded(
    backend, queue, kind
) -> None:
    app = await _edited(backend, queue, kind)
    (report,) = audit(app, now_ms=T0 + 3 * H + 30 * M)
    # The old trigger's slots T0 .. T0 + 2:00 (9) and the new one's from 2:10 to 3:25 (cron: 6)
    # or 3:20 (every: 8).
    new = {"cron": 6, "every": 8}[kind]
    assert (report.unaccounted, report.checked) == ([], 9 + new)


async def test_the_edit_stores_the_replaced_trigger_with_its_span(backend, queue) -> None:
    app = await _edited(backend, queue, "cron")
    (span,) = past_triggers.decode(backend.sync.hget(app.keys.rule_triggers, "r"))
    assert span.trigger == Cron("*/15 * * * *", "UTC")
    assert (span.valid_from_ms, span.valid_until_ms) == (T0 - 1, T0 + 2 * H + 5 * M)


async def test_a_rule_without_a_trigger_history_is_audited_from_its_last_edit(
    backend, queue
) -> None:
    """A rule edited by a zsched that kept no history reads and audits as before."""
    app = await _edited(backend, queue, "cron")
    backend.sync.hdel(app.keys.rule_triggers, "r")
    _drop_outcome(backend, app, T0 + H)
    (report,) = audit(app, now_ms=T0 + 3 * H + 30 * M)
    assert (report.unaccounted, report.checked) == ([], 6)


async def test_an_edit_during_an_outage_expects_the_old_trigger_up_to_its_due_slot(
    backend, queue
) -> None:
    """The old trigger's next slot already due at the edit fires under the new spec, and the
    planner goes on with the new trigger from there: the old one's later slots of the outage
    are not the rule's (no false alarm), its slots before are still checked."""
    clock = FakeClock(T0 - 1)
    app = backend.app(queue, clock=clock)
    drv = Driver(app, backend.async_client(), clock, None)
    app.schedule("r", "t", every=900, misfire="skip")
    await drv.run_until(T0, T0 + H)  # then down: 1:15, 1:30 ... not handled
    clock.set(T0 + 2 * H + 5 * M)
    _edit(drv, app, every=600, misfire="skip")
    await drv.run_until(T0 + 2 * H + 5 * M, T0 + 3 * H)
    await drv.close()
    (span,) = past_triggers.decode(backend.sync.hget(app.keys.rule_triggers, "r"))
    assert span.valid_until_ms == T0 + H + 15 * M  # its slot due at the edit
    (report,) = audit(app, now_ms=T0 + 3 * H)
    assert report.unaccounted == []
    _drop_outcome(backend, app, T0 + 30 * M)
    (report,) = audit(app, now_ms=T0 + 3 * H)
    assert report.unaccounted == [T0 + 30 * M]


def test_the_history_keeps_the_newest_triggers_and_goes_with_the_rule(backend, queue) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=60)
    for i in range(past_triggers.MAX_TRIGGERS + 3):
        clock.set(T0 + (i + 1) * H)
        app.schedule("r", "t", every=61 + i)
    spans = past_triggers.decode(backend.sync.hget(app.keys.rule_triggers, "r"))
    assert len(spans) == past_triggers.MAX_TRIGGERS
    # 19 replaced (every=60, then 61 .. 78): the newest 16 kept, oldest first.
    assert [s.trigger for s in spans] == [Every(61 + j) for j in range(2, 18)]
    app.schedule("r", "t", every=60, misfire="skip")  # another option: the slots stay
    assert len(past_triggers.decode(backend.sync.hget(app.keys.rule_triggers, "r"))) == 16
    assert app.unschedule("r")
    assert not backend.sync.hexists(app.keys.rule_triggers, "r")
    app.schedule("r", "t", every=60)
    app.schedule("r", "t", every=30)
    assert len(past_triggers.decode(backend.sync.hget(app.keys.rule_triggers, "r"))) == 1


async def test_the_consoles_audit_reads_the_history_too(backend, queue) -> None:
    from zsched.rules.ops import load
    from zsched.web import rule_reads

    app = await _edited(backend, queue, "cron")
    _drop_outcome(backend, app, T0 + H)
    now = T0 + 3 * H + 30 * M
    spec, state, *_ = load(app, "r")
    assert rule_reads.audit_rule(app, "r", spec, state, now) == [T0 + H]
    assert rule_reads.audit_rules(app, 0, now) == rule_reads.AuditBatch(0, {"r": 1}, {})


CORRUPT = [b"\xc1 not msgpack", b"\x91\x81\xa1v\x07"]  # not msgpack; a version from elsewhere


@pytest.mark.parametrize("raw", CORRUPT)
async def test_a_corrupt_history_costs_only_the_old_triggers_audit(backend, queue, raw) -> None:
    """The rule is not called unreadable: the audit checks its current trigger (and finds the
    slots since the edit accounted for), and an edit stores a fresh history, readable again."""
    app = await _edited(backend, queue, "every")
    r = backend.sync
    r.hset(app.keys.rule_triggers, "r", raw)
    (res,) = audit(app, now_ms=T0 + 3 * H + 30 * M)
    assert res.unreadable is None and res.checked > 0 and res.unaccounted == []
    app.schedule("r", "t", every=300)
    spans, why = past_triggers.readable(r.hget(app.keys.rule_triggers, "r"))
    assert why is None and [s.trigger for s in spans][-1] == Every(600)
