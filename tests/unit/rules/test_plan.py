"""plan(): the pure slot decisions of one rule (no Redis)."""

from __future__ import annotations

import pytest

from zsched.rules.plan import jitter_ms, plan
from zsched.rules.spec import State, build_spec, default_grace_ms
from zsched.rules.triggers import Every, slot_run_id

M = 60_000
T0 = 1_800_000_000_000 // M * M


def spec(**kw):
    kw.setdefault("every", 60)
    return build_spec("s", "t", **kw)


def test_on_time_slots_fire_at_their_slot() -> None:
    p = plan(spec(), State(), T0, T0 + 5, budget=100)
    assert p.fires == [(T0, T0, "ran")] and p.new_next == T0 + M and p.missed == 0


def test_jitter_delays_the_run_but_the_run_id_keeps_the_slot() -> None:
    s = spec(jitter=30)
    delays = {jitter_ms(s, T0 + i * M) for i in range(50)}
    assert all(0 <= d < 30_000 for d in delays) and len(delays) > 10
    assert jitter_ms(s, T0) == jitter_ms(s, T0)  # replicas and the simulator agree
    ((slot, run_at, _),) = plan(s, State(), T0, T0, 100).fires
    assert slot == T0 and run_at == T0 + jitter_ms(s, T0)
    assert slot_run_id("s", slot).endswith("Z")


def test_catch_up_backlog_waits_while_the_budget_is_zero() -> None:
    s = spec(misfire="catch_up", max_catch_up=10)
    p = plan(s, State(), T0, T0 + 5 * M + 1, budget=0)
    assert [f[2] for f in p.fires] == ["ran"]  # the on-time slot still fires
    assert p.state.backlog == [T0 + i * M for i in range(5)] and p.budget_used == 0
    p2 = plan(s, p.state, None, T0 + 5 * M + 50, budget=2)
    assert [f[0] for f in p2.fires] == [T0, T0 + M] and p2.state.backlog == [
        T0 + 2 * M,
        T0 + 3 * M,
        T0 + 4 * M,
    ]


def test_end_at_stops_the_rule_and_start_at_delays_it() -> None:
    s = spec(start_at=(T0 + 10 * M) / 1000, end_at=(T0 + 12 * M) / 1000)
    assert s.first_slot_after(T0) == T0 + 10 * M
    p = plan(s, State(), T0 + 12 * M, T0 + 12 * M, 100)
    assert p.fires == [(T0 + 12 * M, T0 + 12 * M, "ran")] and p.new_next is None


def test_default_grace_is_half_the_shortest_period_capped_at_a_minute() -> None:
    assert default_grace_ms(Every(10)) == 5_000
    assert default_grace_ms(Every(3600)) == 60_000


def test_dst_choice_is_kept_on_the_rule() -> None:
    s = build_spec("d", "t", cron="30 2 * * *", tz="Europe/Berlin", dst_gap="skip",
                   dst_repeat="both")  # fmt: skip
    assert (s.trigger.dst_gap, s.trigger.dst_repeat) == ("skip", "both")
    from zsched.rules.spec import decode_spec

    assert decode_spec(s.encode()) == s


def test_jitter_is_the_formula_policies_md_gives() -> None:
    """docs/policies.md: crc32("<schedule_id>@<slot in epoch ms>") % jitter_ms (another
    client's dispatcher must spread a slot the same way)."""
    import zlib

    s = spec(jitter=30)
    for slot in (T0, T0 + M, T0 + 7 * M):
        assert jitter_ms(s, slot) == zlib.crc32(f"s@{slot}".encode()) % 30_000


def _passes(s, now, clocks=None, state=None, nxt=T0):
    """plan() as the dispatcher calls it over an outage from T0 to `now`: pass after pass
    while the rule is still due (the clock may move on between them: `clocks`), then the
    catch-up passes, each run ended before the next (the lease free)."""
    state, fires, records = state or State(created_ms=T0 - M), [], []
    clocks = list(clocks or [])
    while nxt is not None and nxt <= now:
        p = plan(s, state, nxt, now, budget=100)
        fires, records = fires + p.fires, records + p.records
        state, nxt = p.state, p.new_next
        now = clocks.pop(0) if clocks else now
    while state.backlog:
        p = plan(s, state, None, now, budget=100, lease_free=True)
        fires, records, state = fires + p.fires, records + p.records, p.state
    return fires, records, state, nxt


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
def test_catch_up_over_several_passes_replays_the_newest_slots_of_the_outage_after_the_on_time_fire(
    overlap,
) -> None:  # fmt: skip
    # 2,500 missed slots take three 1,000-slot passes: each pass kept its own newest 3 and
    # started them (9 replays under allow; under skip one started before the on-time fire).
    s = spec(misfire="catch_up", max_catch_up=3, overlap=overlap)
    now = T0 + 2500 * M + 5
    fires, records, state, _ = _passes(s, now)
    assert [(f[0] - T0) // M for f in fires] == [2500, 2497, 2498, 2499]
    assert [f[2] for f in fires] == ["ran", "replay", "replay", "replay"]
    capped = sorted(r[0] for r in records if r[2] == "catch_up_cap")
    assert capped == [T0 + i * M for i in range(2497)] and state.backlog == []


def test_no_pass_carries_more_records_than_a_fire_call_takes() -> None:
    """Found by make model (session 13): max_catch_up lowered from 3 to 1 during an outage
    left a backlog of 3 beside the next 1,000-slot pass: 1,002 catch_up_cap records, which
    fire.lua refuses (at most 1,000), and the refused call stalled the rule. The pass now
    lists fewer slots; every slot still gets one outcome, the newest replayed."""
    s = spec(misfire="catch_up", max_catch_up=1, overlap="skip")
    backlog = [T0 - 3 * M, T0 - 2 * M, T0 - M]  # kept under the old cap of 3
    state = State(created_ms=T0 - 4 * M, backlog=backlog)
    now = T0 + 1500 * M + 5
    sizes, nxt, records, fires = [], T0, [], []
    while nxt is not None and nxt <= now:
        p = plan(s, state, nxt, now, budget=100)
        sizes.append(len(p.records))
        records, fires, state, nxt = records + p.records, fires + p.fires, p.state, p.new_next
    while state.backlog:
        p = plan(s, state, None, now, budget=100, lease_free=True)
        records, fires, state = records + p.records, fires + p.fires, p.state
    assert max(sizes) <= 1000  # fire.lua's bound
    outcomes = sorted([r[0] for r in records] + [f[0] for f in fires])
    assert outcomes == backlog + [T0 + i * M for i in range(1501)]  # one outcome each
    assert [((f[0] - T0) // M, f[2]) for f in fires] == [(1500, "ran"), (1499, "replay")]


@pytest.mark.parametrize("grace", [None, 0])
def test_coalesce_over_several_passes_names_the_run_that_stands_for_them(grace) -> None:
    # The earlier passes said "into a later slot's run", with no run id to look up.
    s = spec(misfire="coalesce", **({} if grace is None else {"misfire_grace": grace}))
    now = T0 + 2500 * M + 5
    fires, records, state, _ = _passes(s, now)
    target = T0 + 2500 * M  # the on-time fire; with no grace, the newest missed slot
    rid = slot_run_id("s", target)
    assert [(f[0], f[2]) for f in fires] == [(target, "ran" if grace is None else "ran_late")]
    assert sorted(r[0] for r in records) == [T0 + i * M for i in range(2501) if T0 + i * M < target]
    assert {(r[1], r[2], r[3]) for r in records} == {("coalesced", f"into {rid}", rid)}
    assert state.coalesce_into_ms is None


def test_coalesce_keeps_the_run_it_named_when_the_clock_moves_on_between_passes() -> None:
    # A real dispatcher's passes are milliseconds apart: a slot may come due in between.
    s = spec(misfire="coalesce", misfire_grace=0)
    now = T0 + 2500 * M - 5
    fires, records, _, _ = _passes(s, now, clocks=[now + 10, now + 10])
    named = T0 + 2499 * M
    assert {r[3] for r in records if r[1] == "coalesced"} == {slot_run_id("s", named)}
    assert [(f[0], f[2]) for f in fires] == [(named, "ran_late")]  # the run they were told of
    assert T0 + 2500 * M in {r[0] for r in records}  # due by the last pass: coalesced into it


def test_a_second_long_outage_of_a_coalesce_rule_names_its_own_run() -> None:
    # The first outage's last pass had only the on-time slot (1,001 slots: 1,000 + 1) and
    # kept the name it was given; the next outage's slots were coalesced into that old run
    # (found by tests/model/test_rule_machine.py's long_outage step).
    s = spec(misfire="coalesce")
    first = T0 + 1000 * M
    _, _, state, nxt = _passes(s, first + 5)
    assert state.coalesce_into_ms is None
    second = first + 1500 * M
    _, records, _, _ = _passes(s, second + 5, state=state, nxt=nxt)
    assert {r[3] for r in records} == {slot_run_id("s", second)}
