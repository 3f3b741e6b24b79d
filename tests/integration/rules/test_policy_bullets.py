"""docs/policies.md, "Where misfire and overlap meet", the bullets that hold for every pair,
each as a plain test with a FakeClock (issue 18): an edit during an outage, a pause during a
run, retries and their lease under overlap=queue (skip: test_policies_meet.py)."""

from __future__ import annotations

from typing import Any

import zsched
from tests.integration.rules.test_schedules import T0, H, M, one_outcome_per_slot, setup
from zsched import FakeClock
from zsched.rules.triggers import slot_run_id


def _outcomes(app: Any, sid: str) -> list[tuple[int, str, str]]:
    return [(r.slot_ms, r.outcome, r.reason) for r in one_outcome_per_slot(app, sid)]


async def test_an_edit_during_an_outage_judges_the_missed_slots_by_the_edited_policies(
    real: Any, queue: str
) -> None:
    """Edited during the outage from misfire=skip to catch_up: the missed slots are judged by
    catch_up when a dispatcher is back (replayed or capped, none `grace_passed`); replays
    waiting when the rule is edited again stay and run under the newer definition."""
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    got: list[tuple[str, Any]] = []

    @app.task(name="report")
    def report(payload: Any) -> None:
        got.append((zsched.current_run().run_id, payload["v"]))

    rule = {"every": 3600, "overlap": "skip"}
    app.schedule("r", "report", misfire="skip", payload={"v": 1}, **rule)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    clock.set(T0 + 5 * H + 30 * M)  # every dispatcher down since T0: slots 1-5 missed so far
    app.schedule("r", "report", misfire="catch_up", max_catch_up=3, payload={"v": 2}, **rule)
    clock.set(T0 + 10 * H + 5)  # a dispatcher is back
    await d.tick()
    capped = [(T0 + i * H, "skipped", "catch_up_cap") for i in range(1, 7)]
    assert _outcomes(app, "r") == [(T0, "ran", ""), *capped, (T0 + 10 * H, "ran", "")]
    # Replays 7-9 wait for the lease of 10 H's run; the rule is edited again meanwhile.
    app.schedule("r", "report", misfire="catch_up", max_catch_up=3, payload={"v": 3}, **rule)
    now = T0 + 10 * H + 5
    while await w.tick():  # each run ends, freeing the lease; the next pass starts a replay
        now += 1001  # past the dispatcher's catch-up retry (unlease's wake: test_rule_ops_wake)
        clock.set(now)
        await d.tick()
    replays = [(T0 + i * H, "ran_late", "") for i in (7, 8, 9)]
    assert _outcomes(app, "r") == [(T0, "ran", ""), *capped, *replays, (T0 + 10 * H, "ran", "")]
    assert got == [(slot_run_id("r", T0), 1), (slot_run_id("r", T0 + 10 * H), 2),
                   *((slot_run_id("r", T0 + i * H), 3) for i in (7, 8, 9))]  # fmt: skip
    await d.close()
    await w.close()


async def test_a_pause_during_a_run_keeps_its_lease_and_a_waiting_fire_still_starts(
    backend: Any, queue: str
) -> None:
    """overlap=queue, runs of 150 s every 60 s. Paused while T0's run runs and slot 1 waits
    behind it: the run keeps its lease until it ends, the waiting fire starts when it does, no
    slot fires while paused, and the resume records the pause's slots `skipped: paused`."""
    app, clock, drv = setup(backend, queue, start=T0, slow_s=150)
    app.schedule("r", "t", every=60, overlap="queue")
    first, waiting = slot_run_id("r", T0), slot_run_id("r", T0 + M)
    lease = app.keys.lease("r")
    await drv.step(T0)
    await drv.step(T0 + M)  # slot 1 waits behind T0's run
    clock.set(T0 + 90_000)
    assert app.pause_schedule("r")
    await drv.step(T0 + 2 * M)  # paused: slot 2 does not fire
    assert backend.sync.get(lease) == first.encode()  # the run goes on and keeps its lease
    await drv.step(T0 + 150_000)  # T0's run ends: the waiting fire starts now, takes the lease
    assert backend.sync.get(lease) == waiting.encode()
    for t in (T0 + 3 * M, T0 + 4 * M, T0 + 5 * M):
        await drv.step(t)
    clock.set(T0 + 5 * M + 30_000)
    assert app.resume_schedule("r")
    for part in drv.dispatcher.parts:  # what resume's wake message does (test_rule_ops_wake)
        part.invalidate()
    await drv.run_until(T0 + 5 * M + 30_000, T0 + 8 * M)
    assert [(r, s) for r, s, _ in drv.started] == [
        (first, T0), (waiting, T0 + 150_000), (slot_run_id("r", T0 + 6 * M), T0 + 6 * M),
    ]  # fmt: skip
    rows = _outcomes(app, "r")
    assert rows[:6] == [
        (T0, "ran", ""), (T0 + M, "ran", f"queued behind {first}"),
        *((T0 + i * M, "skipped", "paused") for i in (2, 3, 4, 5)),
    ]  # fmt: skip
    assert rows[6] == (T0 + 6 * M, "ran", "")  # the rule goes on from its next slot
    await drv.close()


async def test_under_queue_a_retrying_run_keeps_its_lease_and_a_new_slot_waits_for_it(
    real: Any, queue: str
) -> None:
    """A run that raised Retry(delay=300) keeps the lease while it waits for its next attempt:
    under overlap=queue the next slot waits behind it (a further one is skipped) and starts
    when the retry succeeds; so do the catch-up replays of an outage in the meantime, after it."""
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)
    calls: list[str] = []

    @app.task(name="sweep")
    def sweep(payload: Any) -> None:
        calls.append(zsched.current_run().run_id)
        if len(calls) == 1:
            raise zsched.Retry(delay=300)

    app.schedule("s", "sweep", every=60, overlap="queue", misfire="catch_up", max_catch_up=2)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    first = slot_run_id("s", T0)
    await d.tick()
    await w.tick()  # attempt 1 raises Retry: the run waits in the delayed set until T0 + 300 s
    assert real.sync.get(app.keys.lease("s")) == first.encode()
    clock.set(T0 + M)
    await d.tick()
    clock.set(T0 + 2 * M)
    await d.tick()
    rows = _outcomes(app, "s")
    assert rows[1] == (T0 + M, "ran", f"queued behind {first}")  # waits behind the retry
    assert rows[2][1:] == ("skipped", f"overlap: {first} still running")
    clock.set(T0 + 5 * M + 5)  # every dispatcher down for slots 3 and 4: two replays
    await d.tick()  # slot 5 is skipped (one waits already), the retry is dispatched
    assert await w.tick() == 1  # attempt 2 succeeds: the lease goes to the waiting fire
    now = T0 + 5 * M + 5
    while True:
        await d.tick()
        if not await w.tick():
            break
        now += 1001  # past the catch-up retry (unlease's wake: test_rule_ops_wake)
        clock.set(now)
    assert calls == [first, first, slot_run_id("s", T0 + M),
                     slot_run_id("s", T0 + 3 * M), slot_run_id("s", T0 + 4 * M)]  # fmt: skip
    rows = _outcomes(app, "s")
    assert [r[1:] for r in rows[3:]] == [("ran_late", ""), ("ran_late", ""),
                                         ("skipped", f"overlap: {first} still running")]  # fmt: skip
    await d.close()
    await w.close()


async def test_the_lease_ends_when_the_run_is_dead_lettered(real: Any, queue: str) -> None:
    """policies.md: the lease ends when the run is done or dead (after its last attempt):
    under overlap=skip the next slot after the dead letter runs, not `skipped: overlap`."""
    clock = FakeClock(T0)
    app = real.app(queue, clock=clock)

    @app.task(name="sweep", max_attempts=2, backoff=0)
    def sweep(payload: Any) -> None:
        raise RuntimeError("broken")

    app.schedule("s", "sweep", every=60, overlap="skip")
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    first = slot_run_id("s", T0)
    lease = app.keys.lease("s")
    await d.tick()
    await w.tick()  # attempt 1 fails: retried, the lease kept
    assert real.sync.get(lease) == first.encode()
    await d.tick()
    await w.tick()  # attempt 2 fails: dead
    assert [x.run_id for x in app.dead_letters()] == [first]
    assert not real.sync.exists(lease)
    clock.set(T0 + M)
    await d.tick()
    assert _outcomes(app, "s")[1] == (T0 + M, "ran", "")
    await d.close()
    await w.close()
