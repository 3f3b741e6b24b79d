"""The executable model against the real system, on fixed scenarios (the state machine in
test_rule_machine.py explores random ones; its shrunk counterexamples are kept here)."""

from __future__ import annotations

import pytest

from tests.model.harness import Pair
from tests.model.rule_model import Fate, RuleDef, manual_run_id, run_id
from zsched.rules.triggers import Cron, Every

M = 60_000
H = 3_600_000
T0 = 1_800_000_000_000 // H * H


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
async def test_an_outage_with_slow_runs_and_retries(real, queue, misfire, overlap) -> None:
    rule = RuleDef("r", Every(60), misfire=misfire, overlap=overlap, max_catch_up=3)
    table = [Fate(90_000), Fate(0), Fate(30_000, "retry", 100_000), Fate(10_000, "fail")]
    p = Pair(real, queue, rule, table, T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 5 * M)
        await p.do("set_up", False)
        await p.do("advance_to", T0 + 17 * M + 5)
        await p.do("set_up", True)
        await p.do("advance_to", T0 + 30 * M)
        await p.do("pause")
        await p.do("advance_to", T0 + 34 * M + 7)
        await p.do("resume")
        await p.do("advance_to", T0 + 40 * M)
    finally:
        await p.close()


async def test_a_cron_rule_across_berlins_spring_gap(real, queue) -> None:
    rule = RuleDef("r", Cron("30 2 * * *", "Europe/Berlin", dst_gap="skip"), overlap="skip",
                   grace_ms=60_000)  # fmt: skip
    start = 1_774_656_000_000  # 2026-03-28T00:00Z
    p = Pair(real, queue, rule, [Fate(0)], start)
    try:
        await p.start()
        await p.do("advance_to", start + 3 * 24 * H)
    finally:
        await p.close()


async def test_a_removed_rule_gets_no_lease_back_from_a_retrying_run(real, queue) -> None:
    """Shrunk from make model: a run that retries after its rule was removed (which deleted
    the lease) must not bring the lease back (hold.lua, now extend.lua, took back an absent lease)."""

    def fate_of(rid: str, attempt: int) -> Fate:
        return Fate(30_000, "retry", 30_000) if attempt < 3 else Fate(0)

    rule = RuleDef("r", Every(60), overlap="queue")
    p = Pair(real, queue, rule, fate_of, T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 10_000)
        await p.do("remove")
        await p.do("advance_to", T0 + 40_000)  # attempt 1 retried: waits until T0 + 60 s
        assert p.system.lease() is None
        await p.do("advance_to", T0 + 5 * M)
    finally:
        await p.close()


P30 = 30 * M


@pytest.mark.parametrize("kind", ["ok", "fail"])
@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_a_backfilled_slot_is_not_replayed_after_the_dedupe_window(real, queue, overlap,
                                                                         kind) -> None:  # fmt: skip
    """The divergence the state machine found (issue 18: real `ran_late`, model `duplicate`;
    a Santiago rule, whose slots are far apart): replays waiting for a long run's lease, their
    slots backfilled meanwhile; the backfilled runs end (done, or dead) and the long run ends
    hours later, past the dedupe window (1 h), so `done` no longer knew the runs and the
    replays ran the slots a second time. A backfilled slot is now never fired again by its
    rule: its waiting replay is recorded `duplicate` at the backfill."""

    def fate_of(rid: str, attempt: int) -> Fate:
        return Fate(5 * H) if rid == run_id("r", T0) else Fate(0, kind)

    rule = RuleDef("r", Every(1800), misfire="catch_up", overlap=overlap, max_catch_up=3)
    p = Pair(real, queue, rule, fate_of, T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 1000)
        await p.do("set_up", False)
        await p.do("advance_to", T0 + 4 * P30 + 5)  # slots 1-3 missed, replays wait
        await p.do("set_up", True)
        await p.do("backfill", T0 + P30, T0 + 3 * P30)
        dups = [s for s, o, _, _ in p.model.ledger if o == "duplicate"]
        assert dups == [T0 + k * P30 for k in (1, 2, 3)]
        await p.do("advance_to", T0 + 8 * H)  # Pair checks that no slot fired twice
    finally:
        await p.close()


async def test_a_slot_backfilled_ahead_does_not_fire_again_when_it_comes_due(real, queue) -> None:
    """A backfill of slots not due yet runs them now; hours later (past the dedupe window)
    the rule reaches them: each is recorded `duplicate`, none runs twice."""
    rule = RuleDef("r", Every(1800), misfire="coalesce", overlap="allow")
    p = Pair(real, queue, rule, [Fate(0)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 1000)
        await p.do("backfill", T0 + 3 * H, T0 + 4 * H)
        await p.do("advance_to", T0 + 5 * H)
        dups = sorted(s for s, o, _, _ in p.model.ledger if o == "duplicate")
        assert dups == [T0 + 3 * H, T0 + 3 * H + P30, T0 + 4 * H]
    finally:
        await p.close()


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_a_manual_fire_beside_a_slow_run(real, queue, overlap, force) -> None:
    """run_schedule_now while the rule's run (90 s) holds the lease: allow and force run it
    beside; skip records `skipped: overlap`; queue makes it wait for the run to end. Its own
    run id, recorded as manual; the rule's slots do not move."""
    rule = RuleDef("r", Every(60), overlap=overlap)
    p = Pair(real, queue, rule, [Fate(90_000)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 10_000)
        await p.do("run_now", force)
        manual = manual_run_id("r", T0 + 10_000)
        (rec,) = [(o, r) for s, o, r, rid in p.model.ledger if s == T0 + 10_000]
        if force or overlap == "allow":
            assert rec == ("manual", "") and manual in p.system.live()
        elif overlap == "skip":
            assert rec == ("skipped", f"overlap: {run_id('r', T0)} still running")
        else:
            assert rec == ("manual", f"queued behind {run_id('r', T0)}")
        assert p.model.next_slot == T0 + M
        await p.do("advance_to", T0 + 5 * M)
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_slots_of_a_paused_queue_are_fired_on_time_and_run_after_the_resume(
        real, queue, overlap) -> None:  # fmt: skip
    """pause_queue over 3 slots: each slot is fired (recorded) on time into the delayed set,
    grace does not apply; nothing starts until resume_queue; a fire waiting there holds the
    lease, so under skip the later slots are skipped and under queue one waits."""
    rule = RuleDef("r", Every(60), misfire="skip", overlap=overlap)
    p = Pair(real, queue, rule, [Fate(10_000)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 30_000)
        await p.do("pause_queue")
        await p.do("advance_to", T0 + 3 * M + 30_000)
        assert not [r for r, _, at in p.model.started if at > T0 + 30_000]
        outcomes = [o for s, o, _, _ in sorted(p.model.ledger) if s > T0]
        assert outcomes == {"allow": ["ran"] * 3, "skip": ["ran", "skipped", "skipped"],
                            "queue": ["ran", "ran", "skipped"]}[overlap]  # fmt: skip
        await p.do("resume_queue")
        assert run_id("r", T0 + M) in {r for r, _, at in p.model.started if at == p.model.now}
        await p.do("advance_to", T0 + 6 * M)
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_a_worker_dies_mid_run_and_its_runs_are_reclaimed(real, queue, overlap) -> None:
    """The worker dies while two runs are running (nothing handed back); a new worker reclaims
    them after the visibility timeout and runs them again, same attempt; a rule's lease stays
    with its run, so the next slot obeys the overlap policy."""
    rule = RuleDef("r", Every(60), overlap=overlap)
    p = Pair(real, queue, rule, [Fate(90_000)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + M + 10_000)
        await p.kill_worker()
        assert p.system.reclaimed
        await p.do("advance_to", T0 + 5 * M)
        await p.kill_worker()
        await p.do("advance_to", T0 + 8 * M)
    finally:
        await p.close()


async def test_a_cron_edit_after_a_pause_over_a_gap_gives_each_slot_one_outcome(real, queue):
    """Shrunk from the state machine: a `*/15` Berlin rule paused over the spring gap, resumed
    (its slots `skipped: paused`, 03:00 CEST = 01:00Z among them), then edited to
    `10,25,40,55 * * * *`, whose gap slots shift to 01:00Z: the new trigger judged the gap
    before the edit and recorded `skipped: dst_gap` at 01:00Z too, two outcomes for one
    instant. DST gaps are now judged by the trigger in force when they happen."""
    start = 1_774_742_400_000 - H // 2
    q15 = 900_000
    rule = RuleDef("r", Cron("*/15 * * * *", "Europe/Berlin"), misfire="catch_up",
                   max_catch_up=3)  # fmt: skip
    p = Pair(real, queue, rule, [Fate(0)], start)
    try:
        await p.start(paused=True)
        await p.do("set_up", False)
        await p.do("advance_to", start + 20 * q15 + 5)
        await p.do("set_up", True)
        await p.do("resume")
        await p.edit(trigger=Cron("10,25,40,55 * * * *", "Europe/Berlin"))
        await p.do("advance_to", p.model.now + 12 * q15)  # Pair checks one outcome per slot
        assert not [s for s, o, r, _ in p.model.ledger if r == "dst_gap"]
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "queue"])
async def test_one_of_three_workers_dies_and_only_its_runs_are_reclaimed(real, queue,
                                                                         overlap) -> None:  # fmt: skip
    """Three workers (child processes) share the runs of slow fires; one is killed with
    SIGKILL: its attempts, and only those, start again in its replacement (same attempt);
    the others' go on; every slot keeps one outcome."""
    rule = RuleDef("r", Every(60), overlap=overlap)
    p = Pair(real, queue, rule, [Fate(150_000)], T0 - 1, dispatchers=2, workers=3)
    try:
        await p.start()
        await p.do("advance_to", T0 + 2 * M + 10_000)
        for index in range(3):
            held = p.system.held_by(index)
            before = len(p.system.reclaimed)
            await p.kill_worker(index)
            assert {rid for rid, _, _ in p.system.reclaimed[before:]} == held
        assert p.system.reclaimed  # some worker held a run
        await p.do("advance_to", T0 + 10 * M)
    finally:
        await p.close()


async def test_a_queued_manual_fire_run_forced_meanwhile_does_not_run_again(real, queue) -> None:
    """Shrunk from make model (Lord Howe */15, catch_up x queue, 2 dispatchers, 2 workers): a
    manual fire waits behind the rule's run (overlap queue), a forced manual fire of the same
    instant runs the same run id, and both runs end at one instant. Depending on which
    outcome was written first, unlease started the waiting fire again (a second run of an id
    just done; the harness waited for its lease). Now a waiting fire whose id is live or done
    within the dedupe window is dropped, by unlease.lua as by fire.lua."""
    rule = RuleDef("r", Cron("*/15 * * * *", "Australia/Lord_Howe"), misfire="catch_up",
                   max_catch_up=3, overlap="queue")  # fmt: skip
    start = 1_791_039_600_000  # a slot: the rule's run starts at once
    p = Pair(real, queue, rule, [Fate(450_000, "fail"), Fate(1_350_000, "retry", 0)], start,
             dispatchers=2, workers=2)  # fmt: skip
    try:
        await p.start()
        await p.do("run_now", False)  # waits behind the rule's run
        await p.do("pause")
        await p.do("run_now", True)  # the same run id, forced: runs beside
        assert manual_run_id("r", start) in p.system.live()
        await p.quiet(900_000)
        manual = [rid for rid, attempt, _ in p.system.started if rid == manual_run_id("r", start)]
        assert manual == [manual_run_id("r", start)] * 2  # attempt 1 (retried) and 2, once each
    finally:
        await p.close()


@pytest.mark.parametrize("attempt", range(6))
async def test_a_queued_manual_fire_runs_again_after_its_forced_twin_went_dead(real, queue,
                                                                             attempt) -> None:  # fmt: skip
    """From make model's "stuck waiting for the outcome of ('r@manual:...', 1)" (Berlin */15,
    catch_up x queue): a manual fire waits behind the rule's run (overlap queue); a forced
    manual fire of the same instant runs the same run id and goes dead at the instant the
    rule's run ends. When the dead letter was written before the rule's run's unlease,
    unlease.lua started the waiting fire (its id neither live nor done), which took the lease
    under that same id: the harness, waiting for the lease to leave that id, hung (5 of 6
    runs); past that, the real system had run it again where the model had not (order of two
    writes). Now the forced fire is the waiting one (fire.lua drops it), and the harness
    sees a same-id run live again as written."""
    rule = RuleDef("r", Cron("*/15 * * * *", "Europe/Berlin"), misfire="catch_up",
                   max_catch_up=3, overlap="queue")  # fmt: skip
    start = 1_774_740_600_000  # 2026-03-28T23:30Z, a slot: the rule's run starts at once
    manual = manual_run_id("r", start)

    def fate_of(rid: str, n: int) -> Fate:
        if rid == manual and n == 1:
            return Fate(450_000, "fail")
        return Fate(450_000 if n == 1 else 0, "ok")

    p = Pair(real, queue, rule, fate_of, start, dispatchers=1, workers=2)
    try:
        await p.start()
        await p.do("run_now", False)  # waits behind the rule's run
        await p.do("run_now", True)  # the same run id, forced: runs beside
        await p.do("advance_to", start + 450_000)
        await p.quiet(900_000)
        assert [rid for rid, _, _ in p.system.started if rid == manual] == [manual]
    finally:
        await p.close()


@pytest.mark.parametrize("misfire", ["coalesce", "skip"])
async def test_jitter_keeps_the_two_fall_back_fires_of_a_repeat_both_rule_in_order(
    real, queue, misfire
) -> None:
    """Review of issue 18, F1: the machine drew this rule (a daily 02:30 Berlin rule firing
    both 02:30s of 2026-10-25, jitter 6 h, a quarter of its period) and could not see that
    the 00:30Z slot fired at 03:23:30Z, after the 01:30Z slot's 02:01:30Z. Now the first
    fire is cut to end before the second slot, and Pair.check asserts slot order."""
    trig = Cron("30 2 * * *", "Europe/Berlin", dst_repeat="both")
    rule = RuleDef("r", trig, misfire=misfire, jitter_ms=6 * H)
    start = 1_792_800_000_000  # 2026-10-24T00:00Z
    p = Pair(real, queue, rule, [Fate(0)], start)
    try:
        await p.start()
        await p.do("advance_to", start + 3 * 24 * H)
        ran = [s for s, o, _ in p.system.ledger() if o == "ran"]
        assert 1_792_888_200_000 in ran and 1_792_891_800_000 in ran  # both fall-back slots
    finally:
        await p.close()


@pytest.mark.parametrize("op", ["resume", "edit", "sync"])
async def test_racing_dispatchers_hear_a_rule_operation_on_the_wake_channel(real, queue,
                                                                           op) -> None:  # fmt: skip
    """Three dispatchers asleep (nothing due: a paused rule, or one whose next fire is a day
    away), then a resume or an edit (by schedule() or a declared sync) brings the next fire
    within a minute: only the operation's wake-up can tell them (the harness has no safety
    poll), so with fire.lua's or schedule.lua's PUBLISH taken out this fails."""
    daily = Cron("0 12 * * *", "UTC")
    rule = RuleDef("r", Every(60) if op == "resume" else daily, misfire="skip", overlap="skip")
    p = Pair(real, queue, rule, [Fate(1000)], T0 + 1, dispatchers=3)
    try:
        await p.start(paused=op == "resume")
        assert all(r.due_at != T0 + M for r in p.system.racers)  # nobody wakes for that slot
        if op == "resume":
            await p.do("resume")
        else:
            await p.edit(declared=op == "sync", trigger=Cron("* * * * *", "UTC"))
        await p.do("advance_to", T0 + 3 * M)
        assert [o for s, o, _, _ in p.model.ledger if s > T0] == ["ran", "ran", "ran"]
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "queue"])
async def test_a_run_that_retries_to_exhaustion_goes_dead_and_frees_the_lease(real, queue,
                                                                              overlap) -> None:  # fmt: skip
    """Review of issue 18, M1.c: the machine retried only on a first attempt. The first
    slot's run retries on every attempt: dead at max_attempts (5) in both, its lease freed,
    the fire queued behind it started then."""
    first = run_id("r", T0)

    def fate_of(rid: str, attempt: int) -> Fate:
        return Fate(5_000, "retry", 10_000) if rid == first else Fate(0)

    p = Pair(real, queue, RuleDef("r", Every(60), overlap=overlap), fate_of, T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 5 * M)
        assert p.model.runs[first].state == "dead" and p.model.runs[first].attempt == 5
        assert [a for rid, a, _ in p.system.started if rid == first] == [1, 2, 3, 4, 5]
    finally:
        await p.close()


@pytest.mark.parametrize("misfire", ["catch_up", "coalesce"])
async def test_a_pause_over_more_than_1000_slots_gives_each_slot_one_outcome(real, queue,
                                                                             misfire) -> None:  # fmt: skip
    """Review of issue 18, F2: the real system records a 1,500-slot pause as one range entry,
    the model each slot; they agree slot by slot, and the audit afterwards finds nothing."""
    rule = RuleDef("r", Every(60), misfire=misfire, overlap="skip", max_catch_up=3)
    p = Pair(real, queue, rule, [Fate(90_000), Fate(0)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + 3 * M + 5)
        await p.do("pause")
        await p.do("advance_to", T0 + 1503 * M + 7)
        await p.do("resume")
        rows = p.system.app.schedule_history("r", count=100)
        paused = [(r["slot_ms"], r["last_ms"]) for r in rows if r["reason"] == "paused"]
        assert paused == [(T0 + 4 * M, T0 + 1503 * M + 7)]  # the first slot to the resume
        await p.quiet(M)
    finally:
        await p.close()


async def test_an_edit_of_a_paused_rules_trigger_gives_each_slot_one_outcome(real, queue):
    """Shrunk by hand from a random run (skip x queue, 9 x 50): a paused `30 2 * * *` Berlin
    rule (dst_repeat both) edited to `0 0 * * *`, resumed 20 days later; the audit found the
    new trigger's 00:00 Berlin slot before the old trigger's next slot without an outcome
    (the resume recorded the new trigger's slots from the old one's next slot). Now the edit
    records the old trigger's paused slots so far, and the resume the new one's from then."""
    old = Cron("30 2 * * *", "Europe/Berlin", dst_repeat="both")
    rule = RuleDef("r", old, misfire="skip", overlap="queue")
    start = 1_792_800_000_000  # 2026-10-24T00:00Z
    p = Pair(real, queue, rule, [Fate(0)], start)
    try:
        await p.start()
        await p.do("advance_to", start + 36 * H)  # 2026-10-25T12:00Z
        await p.do("pause")  # the old trigger's next slot: 2026-10-26T01:30Z
        await p.edit(trigger=Cron("0 0 * * *", "Europe/Berlin"))  # next: 2026-10-25T23:00Z
        await p.do("advance_to", start + 20 * 24 * H)
        await p.do("resume")
        await p.quiet(24 * H)
    finally:
        await p.close()


async def test_a_long_pause_then_a_trigger_edit_keeps_the_ranges_own_slots(real, queue) -> None:
    """From make test's derandomised profile (coalesce x allow and three more): a 1,500-slot
    pause, recorded by the real system as one range entry, then an edit of the interval. The
    harness read that range with the new interval's slots (its expansion used the rule's
    current trigger) and reported 'ledger differs'; it now uses the trigger in force then."""
    rule = RuleDef("r", Every(60), misfire="coalesce", overlap="allow")
    p = Pair(real, queue, rule, [Fate(0)], T0 - 1)
    try:
        await p.start(paused=True)
        await p.do("advance_to", T0 + 1500 * M)
        await p.do("resume")
        await p.edit(trigger=Every(45))
        await p.do("advance_to", T0 + 1510 * M)
        await p.quiet(M)
    finally:
        await p.close()
