"""Found by a review of recurring rules (with Redis): each test failed before its fix, where
the code differed from docs/policies.md."""

from __future__ import annotations

from collections import Counter

from zsched import FakeClock
from zsched.dispatch.firer import RuleFirer
from zsched.dispatch.simulate import Driver, ledger_rows

H = 3_600_000
T0 = 1_800_000_000_000 // H * H


def setup(backend, queue):
    clock = FakeClock(T0 - 1)
    app = backend.app(queue, clock=clock)
    return app, clock, Driver(app, backend.async_client(), clock, None)


def test_sync_of_declared_rules_after_one_was_paused(backend, queue) -> None:
    # policies.md lists pause_schedule for any rule, and declared rules are "synced when a
    # dispatcher starts". After pausing a declared rule, sync_schedules raises RuleError
    # ("use pause_schedule/resume_schedule to pause") because the declared options say
    # paused=False: Dispatcher.run retries _sync_declared forever and never dispatches.
    app = backend.app(queue, clock=FakeClock(T0))
    app.declare("nightly", "report", cron="0 2 * * *", tz="Europe/Berlin")
    app.declare("sweep", "sweep", every=600)
    app.sync_schedules()
    assert app.pause_schedule("nightly")
    result = app.sync_schedules()
    assert sorted(result["unchanged"]) == ["nightly", "sweep"]
    assert [i.paused for i in app.schedules()] == [True, False]  # the pause is kept


async def test_an_edit_while_catch_up_waits_loses_no_slot(backend, queue) -> None:
    # policies.md: "editing a rule keeps its history ... none is lost" and "Every expected slot
    # of a rule ends with exactly one recorded outcome". upsert() writes the state with
    # backlog=[] (and schedule.lua drops rule_catchup), so catch-up slots still waiting for
    # budget (workers behind) vanish with no outcome and are never replayed.
    app, clock, drv = setup(backend, queue)
    app.schedule("hourly", "report", every=3600, misfire="catch_up", max_catch_up=5)
    (firer,) = [p for p in drv.dispatcher.parts if isinstance(p, RuleFirer)]
    await drv.step(T0)
    firer.catch_up_budget = 0  # the ready stream is full: replays wait
    await drv.step(T0 + 20 * H + 5)
    assert app.schedules()[0].catch_up_waiting == 5
    clock.set(T0 + 20 * H + 10)
    app.schedule("hourly", "report", every=3600, misfire="catch_up", max_catch_up=5,
                 payload={"v": 2})  # fmt: skip
    firer.catch_up_budget = 100
    await drv.run_until(T0 + 20 * H + 20, T0 + 21 * H + 10)
    await drv.close()
    counts = Counter(r.slot_ms for r in ledger_rows(app, "hourly"))
    assert sorted(counts) == [T0 + i * H for i in range(22)]
    assert set(counts.values()) == {1}


async def test_a_pause_while_catch_up_waits_keeps_the_replays_for_after_resume(backend, queue):
    """pause_schedule emptied the backlog too: the waiting replays had no outcome, ever."""
    app, clock, drv = setup(backend, queue)
    app.schedule("hourly", "report", every=3600, misfire="catch_up", max_catch_up=5)
    (firer,) = [p for p in drv.dispatcher.parts if isinstance(p, RuleFirer)]
    await drv.step(T0)
    firer.catch_up_budget = 0
    await drv.step(T0 + 20 * H + 5)
    assert app.schedules()[0].catch_up_waiting == 5
    clock.set(T0 + 20 * H + 10)
    assert app.pause_schedule("hourly")
    firer.catch_up_budget = 100
    await drv.run_until(T0 + 20 * H + 20, T0 + 20 * H + 30)
    assert app.schedules()[0].catch_up_waiting == 5, "no replay while paused"
    clock.set(T0 + 20 * H + 40)
    assert app.resume_schedule("hourly")
    await drv.run_until(T0 + 20 * H + 50, T0 + 21 * H + 10)
    await drv.close()
    counts = Counter(r.slot_ms for r in ledger_rows(app, "hourly"))
    assert sorted(counts) == [T0 + i * H for i in range(22)]
    assert set(counts.values()) == {1}


def test_an_edit_or_a_pause_racing_a_fire_keeps_what_the_fire_wrote(backend, queue):
    """upsert and pause read the rule, then wrote it back without a compare-and-set: a fire in
    between lost its state (its counts, its backlog) and its slot came back as the next fire."""
    from dataclasses import replace

    from zsched.rules.spec import decode_state

    app = backend.app(queue, clock=FakeClock(T0))
    app.schedule("s", "t", every=60)
    k, r = app.keys, backend.sync
    real = app.scripts.run
    raced: list[str] = []

    def fire_meanwhile(call):
        if call.name == "schedule" and not raced:  # between the caller's read and its write
            raced.append(call.name)
            state = decode_state(r.hget(k.rule_state, "s"))
            r.hset(k.rule_state, "s", replace(state, fired=state.fired + 1).encode())
            r.zadd(k.rule_next, {"s": int(r.zscore(k.rule_next, "s")) + 60_000})
        return real(call)

    app.scripts.run = fire_meanwhile
    for change in (lambda: app.schedule("s", "t", every=60, payload={"v": 2}),
                   lambda: app.pause_schedule("s")):  # fmt: skip
        raced.clear()
        fired = app.schedules()[0].fired
        change()
        assert raced, "the race was staged"
        assert app.schedules()[0].fired == fired + 1  # what the fire wrote survived
    app.scripts.run = real
    assert app.schedules()[0].paused
