"""Recurring rules in Redis with an injected clock: misfire, overlap, edits, pauses, the
ledger, backfill, declared rules, audit and the simulator. Nothing waits for real hours."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC

import pytest

import zsched
from tests.state import delayed_count, delayed_ids, envelope_of
from zsched import FakeClock
from zsched.dispatch.simulate import Driver, ledger_rows, simulate
from zsched.protocol.replies import ScheduleResult
from zsched.rules.audit import audit
from zsched.rules.triggers import slot_run_id
from zsched.store import delayed
from zsched.store import scripts as S

H = 3_600_000
M = 60_000
T0 = 1_800_000_000_000 // H * H  # an hour boundary


def setup(backend, queue, start=T0 - 1, slow_s=None):
    clock = FakeClock(start)
    app = backend.app(queue, clock=clock)
    return app, clock, Driver(app, backend.async_client(), clock, slow_s)


def one_outcome_per_slot(app, sid):
    rows = ledger_rows(app, sid)
    slots = Counter(r.slot_ms for r in rows)
    assert set(slots.values()) == {1}, [s for s, n in slots.items() if n > 1]
    return rows


@pytest.mark.parametrize("policy", ["catch_up", "coalesce", "skip"])
async def test_each_misfire_policy_over_an_outage_of_19_missed_slots(backend, queue, policy):
    """docs/policies.md's worked example: down from 00:00:01 to 20:00:00.005, so 01:00-19:00
    are missed (19 slots) and 20:00 is on time."""
    app, clock, drv = setup(backend, queue)
    app.schedule("hourly", "report", every=3600, misfire=policy, max_catch_up=5)
    await drv.step(T0)  # the dispatcher is up: T0 fires on time
    # Down until 5 ms after the 20th slot: 19 missed, the 20th on time.
    await drv.run_until(T0 + 20 * H + 5, T0 + 20 * H + 1000)
    rows = one_outcome_per_slot(app, "hourly")
    assert [r.slot_ms for r in rows] == [T0 + i * H for i in range(21)]
    got = Counter((r.outcome, r.reason.split(" ")[0]) for r in rows)
    expected = {
        "catch_up": {("ran", ""): 2, ("ran_late", ""): 5, ("skipped", "catch_up_cap"): 14},
        "coalesce": {("ran", ""): 2, ("coalesced", "into"): 19},
        "skip": {("ran", ""): 2, ("skipped", "grace_passed"): 19},
    }[policy]
    assert dict(got) == expected
    runs = [r for r, *_ in drv.started]
    assert len(runs) == sum(n for (o, _), n in expected.items() if o.startswith("ran"))
    if policy == "catch_up":  # the on-time fire is not starved by the replays
        assert runs[1] == slot_run_id("hourly", T0 + 20 * H)
        assert runs[2:] == [slot_run_id("hourly", T0 + i * H) for i in range(15, 20)]
    if policy == "coalesce":
        assert {r.run_id for r in rows if r.outcome == "coalesced"} == {runs[1]}
    (info,) = app.schedules()
    assert (info.missed, info.next_fire_ms) == (19, T0 + 21 * H)
    assert app.metrics.missed_slots.labels(queue, "hourly", policy)._value.get() == 19
    await drv.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_each_overlap_policy_with_runs_slower_than_the_interval(backend, queue, overlap):
    app, clock, drv = setup(backend, queue, slow_s=150)  # runs take 2.5 intervals
    app.schedule("sweep", "sweep", every=60, overlap=overlap)
    await drv.run_until(T0, T0 + 9 * M)
    rows = one_outcome_per_slot(app, "sweep")
    assert [r.slot_ms for r in rows] == [T0 + i * M for i in range(10)]
    outcomes = [r.outcome for r in rows]
    starts = sorted((s, f) for _, s, f in drv.started)
    await drv.close()
    if overlap == "allow":
        assert outcomes == ["ran"] * 10 and len(starts) == 10
        return
    # Never two runs of the rule at once.
    assert all(
        a_end <= b_start for (_, a_end), (b_start, _) in zip(starts, starts[1:], strict=False)
    )
    if overlap == "skip":
        assert outcomes == ["ran", "skipped", "skipped"] * 3 + ["ran"]
        assert app.metrics.overlap_skips.labels(queue, "sweep")._value.get() == 6
    else:
        # One waits (and starts when the previous run ends); a third in the meantime is skipped.
        assert outcomes[:4] == ["ran", "ran", "skipped", "ran"]
        assert "queued behind sweep@" in rows[1].reason
        assert starts[1][0] == starts[0][1]  # the waiting fire started as the first ended


def test_schedule_returns_a_named_result_that_equals_the_old_integer(backend, queue) -> None:
    app, _, _ = setup(backend, queue)
    created = app.schedule("named", "t", every=60)
    assert created is zsched.ScheduleResult.CREATED and created == 1
    assert app.schedule("named", "t", every=60) is ScheduleResult.UNCHANGED
    updated = app.schedule("named", "t", every=120)
    assert updated is ScheduleResult.UPDATED and updated == 2
    assert app.sync_schedules() == {k: [] for k in
                                    ("created", "updated", "unchanged", "undeclared", "removed",
                                                 "unreadable")
                                    } | {"undeclared": ["named"]}  # fmt: skip


async def test_a_rule_edited_and_another_paused_while_due(backend, queue) -> None:
    app, clock, drv = setup(backend, queue)
    app.schedule("edited", "t", every=60, payload={"v": 1})
    app.schedule("paused", "t", every=60)
    await drv.step(T0)
    clock.set(T0 + M + 10)  # both due now, not yet fired
    assert app.schedule("edited", "t", every=60, payload={"v": 2}) == ScheduleResult.UPDATED
    assert app.pause_schedule("paused")
    await drv.step(T0 + M + 10)
    edited = one_outcome_per_slot(app, "edited")
    assert [r.outcome for r in edited] == ["ran", "ran"]  # the due slot fired, with the edit
    raw = envelope_of(backend.sync, app.keys, slot_run_id("edited", T0 + M)) or b""
    assert raw == b"" or b"\x02" in raw
    # The paused rule fires nothing; on resume its missed slots are recorded as paused.
    await drv.run_until(T0 + 2 * M, T0 + 5 * M)
    clock.set(T0 + 5 * M + 30_000)
    assert app.resume_schedule("paused")
    rows = one_outcome_per_slot(app, "paused")
    assert [(r.outcome, r.reason) for r in rows] == [("ran", "")] + [("skipped", "paused")] * 5
    assert app.schedules()[1].next_fire_ms == T0 + 6 * M
    assert audit(app, now_ms=T0 + 5 * M + 30_000)[1].unaccounted == []
    await drv.close()


async def test_declared_rules_sync_twice_with_no_change(backend, queue) -> None:
    app, clock, drv = setup(backend, queue)
    app.declare("nightly", "report", cron="0 2 * * *", tz="Europe/Berlin")
    app.declare("sweep", "sweep", every=600, overlap="skip")
    first = app.sync_schedules()
    assert (first["created"], first["unchanged"]) == (["nightly", "sweep"], [])
    before = backend.sync.hgetall(app.keys.rule_state)
    second = app.sync_schedules()
    assert (second["created"], second["updated"], second["unchanged"]) == (
        [],
        [],
        ["nightly", "sweep"],
    )
    assert backend.sync.hgetall(app.keys.rule_state) == before
    app.schedule("stray", "t", every=60)
    assert app.sync_schedules()["undeclared"] == ["stray"]
    assert app.sync_schedules(prune=True)["removed"] == ["stray"]
    await drv.close()


async def test_backfill_run_twice_adds_nothing_the_second_time(backend, queue) -> None:
    app, clock, drv = setup(backend, queue, start=T0 + 10 * H)
    app.schedule("hourly", "report", every=3600)
    from datetime import datetime

    start = datetime.fromtimestamp(T0 / 1000, UTC)
    end = datetime.fromtimestamp((T0 + 3 * H) / 1000, UTC)
    assert app.backfill("hourly", start, end) == 4
    assert app.backfill("hourly", start, end) == 0
    ids = sorted(delayed_ids(backend.sync, app.keys))
    assert ids == sorted(slot_run_id("hourly", T0 + i * H) for i in range(4))
    await drv.close()


async def test_the_audit_finds_the_slots_of_a_hung_dispatcher(backend, queue) -> None:
    app, clock, drv = setup(backend, queue)
    app.schedule("minutely", "t", every=60)
    await drv.run_until(T0, T0 + 3 * M)
    assert audit(app, now_ms=T0 + 3 * M + 1)[0].unaccounted == []
    # The dispatcher hangs: nobody fires for 5 minutes.
    report = audit(app, now_ms=T0 + 9 * M)[0]
    assert report.unaccounted == [T0 + i * M for i in range(4, 9)]
    await drv.close()


async def test_the_simulator_and_a_real_run_agree_slot_for_slot(real, queue) -> None:
    """A real worker on real Redis vs the simulator on fakeredis, over the same outage."""
    clock = FakeClock(T0 - 1)
    app = real.app(queue, clock=clock)

    @app.task(name="t")
    def t(payload):
        pass

    app.schedule("r", "t", cron="*/15 * * * *", tz="Europe/Berlin", misfire="catch_up",
                 max_catch_up=3)  # fmt: skip
    down_from, down_to = T0, T0 + 2 * H + 7 * M
    predicted = await asyncio.to_thread(simulate, app, "r", down_from, down_to)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    t_ = down_to
    end = predicted[-1].slot_ms
    while t_ <= end:
        clock.set(t_)
        await d.tick()
        await w.tick()
        nxt = app.schedules()[0]
        t_ = min(nxt.next_fire_ms, t_ + 20) if nxt.catch_up_waiting else nxt.next_fire_ms
    actual = ledger_rows(app, "r")
    assert [(r.slot_ms, r.outcome, r.reason) for r in actual] == [
        (r.slot_ms, r.outcome, r.reason) for r in predicted
    ]
    assert Counter(r.outcome for r in actual)["ran_late"] == 3
    await d.close()
    await w.close()


async def test_a_real_worker_frees_the_overlap_lease_when_the_run_finishes(backend, queue):
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    ran = []

    @app.task(name="sweep")
    def sweep(payload):
        ran.append(zsched.current_run().run_id)

    app.schedule("sweep", "sweep", every=60, overlap="skip")
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    for i in range(3):
        clock.set(T0 + i * M)
        await d.tick()
        await w.tick()
    assert ran == [slot_run_id("sweep", T0 + i * M) for i in range(3)]
    assert backend.sync.exists(app.keys.lease("sweep")) == 0
    await d.close()
    await w.close()


def test_bad_rules_are_refused_naming_the_bad_part(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(zsched.RuleError, match="zone is required|time zone"):
        app.schedule("a", "t", cron="0 2 * * *")
    with pytest.raises(zsched.RuleError, match="Mars"):
        app.schedule("a", "t", cron="0 2 * * *", tz="Mars/Olympus")
    with pytest.raises(zsched.RuleError, match="minute"):
        app.schedule("a", "t", cron="61 * * * *", tz="UTC")
    with pytest.raises(zsched.RuleError, match="interval"):
        app.schedule("a", "t", every=0)
    with pytest.raises(zsched.RuleError, match="exactly one of cron= or every="):
        app.schedule("a", "t")
    with pytest.raises(zsched.RuleError, match="misfire"):
        app.schedule("a", "t", every=5, misfire="sometimes")
    assert app.schedules() == []


async def test_a_lease_left_by_a_worker_that_died_before_unlease_is_freed_at_the_next_fire(
    backend, queue
) -> None:
    app, clock, drv = setup(backend, queue, slow_s=30)
    app.schedule("sweep", "sweep", every=60, overlap="skip")
    await drv.step(T0)
    ((entry, (_, run_id, _, _)),) = drv.running.items()
    # The run is acked, but its worker dies before calling unlease: the lease stays behind.

    app.scripts.run(
        S.ack(app.keys, "sim", [(entry, run_id)], now_ms=T0 + 1, dedupe_window_ms=60_000)
    )
    drv.running.clear()
    assert backend.sync.get(app.keys.lease("sweep")) == run_id.encode()
    await drv.step(T0 + M)
    assert [r.outcome for r in ledger_rows(app, "sweep")] == ["ran", "ran"]
    await drv.close()


async def test_a_fixed_time_rule_that_skips_dst_gaps_records_the_missing_day(backend, queue):
    """Berlin springs forward on 2026-03-29 at 02:00: 02:30 does not exist that day."""
    from datetime import datetime

    day = 24 * H
    mar28 = int(datetime(2026, 3, 28, tzinfo=UTC).timestamp() * 1000)
    app, clock, drv = setup(backend, queue, start=mar28)
    app.schedule("night", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip")
    await drv.run_until(mar28, mar28 + 3 * day)
    rows = one_outcome_per_slot(app, "night")
    got = [(datetime.fromtimestamp(r.slot_ms / 1000, UTC).isoformat(), r.outcome,
            r.reason) for r in rows]  # fmt: skip
    assert got == [
        ("2026-03-28T01:30:00+00:00", "ran", ""),
        ("2026-03-29T01:00:00+00:00", "skipped", "dst_gap"),  # where 02:30 would have been
        ("2026-03-30T00:30:00+00:00", "ran", ""),
    ]
    await drv.close()


async def test_a_waiting_fire_whose_run_id_went_live_is_dropped_not_started(backend, queue):
    """overlap=queue: when the lease expires, fire.lua starts the waiting fire, unless its run
    id is live again (enqueued by hand meanwhile): that run is the slot's and keeps its due."""
    app, clock, drv = setup(backend, queue, slow_s=150)
    app.schedule("sweep", "sweep", every=60, overlap="queue")
    await drv.step(T0)
    await drv.step(T0 + M)
    k, r = app.keys, backend.sync
    assert r.hexists(k.rule_waiting, "sweep")
    wid = slot_run_id("sweep", T0 + M)
    far = (T0 + 10 * H) / 1000
    assert not app.enqueue("sweep", {"by": "hand"}, run_id=wid, run_at=far).duplicate
    r.delete(k.lease("sweep"))  # as if the first run's lease expired
    hand = envelope_of(r, k, wid)
    await drv.step(T0 + 2 * M)
    assert dict(delayed.runs(r, k))[wid] == T0 + 10 * H  # was moved to now
    assert envelope_of(r, k, wid) == hand  # was replaced by the fire's
    assert delayed_count(r, k) == len(delayed_ids(r, k))
    # The lease was free, so the slot of this pass started at once.
    assert slot_run_id("sweep", T0 + 2 * M) in {s[0] for s in drv.started}
    await drv.close()
