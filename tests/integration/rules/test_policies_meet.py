"""Where policies meet (issue 18): catch-up replays under overlap skip/queue, the overlap
lease of a run waiting for its retry. Each test failed before its fix."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.rules.test_schedules import T0, H, M, one_outcome_per_slot, setup
from zsched.rules.triggers import slot_run_id


@pytest.mark.parametrize("overlap", ["skip", "queue"])
@pytest.mark.parametrize("slow_s", [None, 600])
async def test_catch_up_replays_run_one_after_another_under_overlap(backend, queue, overlap,
                                                                    slow_s) -> None:  # fmt: skip
    """The README's rule: catch_up, max_catch_up=3, overlap=queue (and skip). Every replay
    runs; none is skipped or queued because of another replay."""
    app, clock, drv = setup(backend, queue, slow_s=slow_s)
    app.schedule("r", "report", every=3600, misfire="catch_up", max_catch_up=3, overlap=overlap)
    await drv.step(T0)
    await drv.run_until(T0 + 10 * H + 5, T0 + 10 * H + 50 * 60_000)
    rows = one_outcome_per_slot(app, "r")
    got = Counter((r.outcome, r.reason.split(" ")[0]) for r in rows)
    assert dict(got) == {("ran", ""): 2, ("ran_late", ""): 3, ("skipped", "catch_up_cap"): 6}
    runs = [r for r, *_ in drv.started]
    assert runs == [slot_run_id("r", T0 + i * H) for i in (0, 10, 7, 8, 9)]
    starts = sorted((s, f) for _, s, f in drv.started)
    # Never two runs of the rule at once.
    assert all(
        a_end <= b_start for (_, a_end), (b_start, _) in zip(starts, starts[1:], strict=False)
    )
    await drv.close()


async def test_the_overlap_lease_lasts_while_the_run_waits_for_its_retry(real, queue) -> None:
    """Defect 3: a run that raised Retry(delay=300) sits in the delayed set and nobody renews
    its lease; the lease must outlive the wait, so the next slot is judged against it."""
    import zsched
    from zsched import FakeClock

    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    calls = []

    @app.task(name="sweep")
    def sweep(payload):
        calls.append(zsched.current_run().run_id)
        if len(calls) == 1:
            raise zsched.Retry(delay=300)

    # A lease option of 2 s, shorter than the retry's 300 s wait (it was the lease's TTL).
    app.schedule("sweep", "sweep", every=60, overlap="skip", lease=2)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    await w.flush()
    first = slot_run_id("sweep", T0)
    assert calls == [first]
    lease = app.keys.lease("sweep")
    assert real.sync.get(lease) == first.encode()
    # Held for the whole wait: no TTL (not the 2 s lease, which would lapse in the wait).
    assert real.sync.pttl(lease) == -1
    clock.set(T0 + 60_000)  # the next slot, while the run waits for its retry
    await d.tick()
    rows = one_outcome_per_slot(app, "sweep")
    assert (rows[1].outcome, rows[1].reason) == ("skipped", f"overlap: {first} still running")
    await d.close()
    await w.close()


@pytest.mark.parametrize("where", ["ready", "delayed"])
async def test_the_overlap_lease_lasts_while_the_run_waits_to_be_read(real, queue, where):
    """Defect 3's other half: a fire that waits unread on the ready stream (every worker
    busy) or in the delayed set (the queue paused) is renewed by nobody. Its lease had the
    rule's `lease` TTL (real seconds), so after it the next slot fired beside the waiting
    run under overlap=skip. The lease now has no TTL while its run lives: it ends at done,
    dead or cancel, or when a fire finds its run gone (stale)."""
    import zsched
    from zsched import FakeClock

    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    ran = []

    @app.task(name="sweep")
    def sweep(payload):
        ran.append(zsched.current_run().run_id)

    app.schedule("sweep", "sweep", every=60, overlap="skip", lease=1)
    if where == "delayed":
        app.pause_queue()
    d = app.dispatcher(redis=real.async_client())
    await d.tick()
    first = slot_run_id("sweep", T0)
    assert real.sync.xlen(app.keys.ready) == (1 if where == "ready" else 0)
    lease = app.keys.lease("sweep")
    assert real.sync.get(lease) == first.encode()
    assert real.sync.pttl(lease) == -1  # was 1000: lapsed before any worker read the run
    clock.set(T0 + 3_600_000)  # an hour on the clock (the lease's TTL was 1 s), run unread
    await d.tick()
    rows = one_outcome_per_slot(app, "sweep")
    assert rows[-1].outcome == "skipped" and rows[-1].reason.startswith(f"overlap: {first}")
    if where == "delayed":
        app.resume_queue()
        await d.tick()
    w = app.worker(redis=real.async_client())
    await w.tick()
    await w.flush()
    assert ran == [first] and not real.sync.exists(lease)  # done: the lease ended with it
    clock.set(T0 + 3_660_000)
    await d.tick()
    assert one_outcome_per_slot(app, "sweep")[-1].outcome == "ran"
    await d.close()
    await w.close()


async def test_a_dst_gap_between_creation_and_the_first_fire_is_recorded(backend, queue):
    """Defect 5: created after 2026-03-28's fire, the rule's first fire is 2026-03-30; the
    gap of 2026-03-29 (02:30 Berlin does not exist) falls before it and gets its record."""
    from datetime import UTC, datetime

    noon28 = int(datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp() * 1000)
    app, clock, drv = setup(backend, queue, start=noon28)
    app.schedule("night", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip")
    await drv.run_until(noon28, noon28 + 2 * 24 * H)
    rows = one_outcome_per_slot(app, "night")
    got = [(datetime.fromtimestamp(r.slot_ms / 1000, UTC).isoformat(), r.outcome,
            r.reason) for r in rows]  # fmt: skip
    assert got == [
        ("2026-03-29T01:00:00+00:00", "skipped", "dst_gap"),
        ("2026-03-30T00:30:00+00:00", "ran", ""),
    ]
    await drv.close()


async def test_the_audit_sees_a_dst_gap_that_has_no_record(backend, queue):
    """Defect 5, the audit's half: a dst_gap="skip" rule whose gap got no record shows up."""
    from datetime import UTC, datetime

    from zsched.rules.audit import audit

    noon28 = int(datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp() * 1000)
    gap = int(datetime(2026, 3, 29, 1, tzinfo=UTC).timestamp() * 1000)
    app, clock, drv = setup(backend, queue, start=noon28)
    app.schedule("night", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip")
    await drv.run_until(noon28 + 2 * 24 * H, noon28 + 2 * 24 * H)
    later = noon28 + 2 * 24 * H + 5 * H
    (report,) = audit(app, now_ms=later)
    assert report.unaccounted == []
    # The gap's record lost (what defect 5 did: never written): the audit says so.
    ledger = app.keys.ledger("night")
    (entry,) = [i for i, f in backend.sync.xrange(ledger) if int(f[b"slot_ms"]) == gap]
    backend.sync.xdel(ledger, entry)
    (report,) = audit(app, now_ms=later)
    assert report.unaccounted == [gap]
    await drv.close()


async def test_a_run_reclaimed_after_its_worker_died_keeps_the_lease(real, queue) -> None:
    """The lease lasts for the run's whole life, also while its entry waits to be reclaimed
    from a worker that died mid-run: the next slot is judged against it (overlap=skip)."""
    import zsched
    from zsched import FakeClock
    from zsched.protocol.keys import GROUP
    from zsched.worker.recovery import ensure_group

    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    done: list[str] = []

    @app.task(name="sweep")
    def sweep(payload):
        done.append(zsched.current_run().run_id)

    app.schedule("sweep", "sweep", every=60, overlap="skip")
    d = app.dispatcher(redis=real.async_client())
    await d.tick()
    first = slot_run_id("sweep", T0)
    # A worker reads the fire and dies before it finishes: its entry stays pending.
    aio = real.async_client()
    await ensure_group(aio, app.keys)
    assert await aio.xreadgroup(GROUP, "died", {app.keys.ready: ">"}, count=10)
    clock.set(T0 + 60_000)  # the next slot, while the run waits to be reclaimed
    await d.tick()
    rows = one_outcome_per_slot(app, "sweep")
    assert (rows[1].outcome, rows[1].reason) == ("skipped", f"overlap: {first} still running")
    # Its visibility timeout passes: the dead worker's entry made idle for ten minutes
    # (XCLAIM to itself with IDLE; JUSTID keeps the delivery count), not slept through.
    rows = real.sync.xpending_range(app.keys.ready, GROUP, "-", "+", 10, consumername="died")
    real.sync.xclaim(app.keys.ready, GROUP, "died", 0, [r["message_id"] for r in rows],
                     idle=600_000, justid=True)  # fmt: skip
    assert real.sync.exists(app.keys.lease("sweep"))  # still held for the waiting run
    # Another worker's reclaim pass takes it over, runs it, and its ack frees the lease.
    w = app.worker(redis=real.async_client())
    assert await w.reader.tick() == 1  # reclaimed and started
    await w.drain()
    assert not real.sync.exists(app.keys.lease("sweep"))
    assert done == [first]
    clock.set(T0 + 120_000)
    await d.tick()
    rows = one_outcome_per_slot(app, "sweep")
    assert (rows[2].outcome, rows[2].reason) == ("ran", "")
    for c in (d, w):
        await c.close()
    await aio.aclose()


async def test_under_catch_up_and_queue_runs_that_outlast_the_interval_keep_replays_waiting(
    backend, queue
) -> None:
    """policies.md's catch_up x queue cell: runs that outlast the interval keep the queue full
    (a new slot always waits behind the live run), and the replays wait until it empties."""
    app, clock, drv = setup(backend, queue, start=T0, slow_s=90)  # 90 s runs, every 60 s
    app.schedule("r", "report", every=60, misfire="catch_up", max_catch_up=3, overlap="queue")
    await drv.step(T0)
    await drv.run_until(T0 + 10 * M + 5, T0 + 30 * M)  # down for slots 1-9
    replays = {slot_run_id("r", T0 + i * M) for i in (7, 8, 9)}
    started = [r for r, *_ in drv.started]
    new_slots = [slot_run_id("r", T0 + i * M) for i in range(10, 31)]
    # Only new slots ran, one after another, each waiting behind the live run: no replay yet.
    assert started[0] == slot_run_id("r", T0) and len(started) > 10
    assert started[1:] == [r for r in new_slots if r in started[1:]]
    pairs = zip(drv.started, drv.started[1:], strict=False)
    assert all(end <= start for (_, _, end), (_, start, _) in pairs)
    rows = [r for r in one_outcome_per_slot(app, "r") if T0 + 11 * M <= r.slot_ms <= T0 + 30 * M]
    assert len(rows) == 20 and all(  # the queue is never empty: each waits or is skipped
        r.reason.startswith(("queued behind", "overlap:")) for r in rows
    ), rows
    assert not replays & set(started)
    assert backend.sync.zcard(app.keys.rule_catchup) == 1  # the replays wait
    # The queue empties when the slots come further apart than a run lasts: the replays go.
    app.schedule("r", "report", every=3600, misfire="catch_up", max_catch_up=3, overlap="queue")
    for part in drv.dispatcher.parts:  # what the edit's wake message does
        part.invalidate()
    await drv.run_until(T0 + 30 * M, T0 + 45 * M)
    assert [r for r, *_ in drv.started][-3:] == sorted(replays)
    await drv.close()
