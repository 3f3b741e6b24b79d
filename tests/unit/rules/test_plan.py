"""plan(): the pure slot decisions of one rule (no Redis)."""

from __future__ import annotations

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
