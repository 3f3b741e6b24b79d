"""Each cell of docs/policies.md's misfire x overlap table, on the real system and the model
at once (Pair checks they agree after every step and keeps the ledger invariants). Every
cell twice: a 1-minute interval rule and a seconds rule (a 6-field cron, every 20 s); the
times below are in periods of the rule (P), so the cells read the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.model.harness import Pair
from tests.model.rule_model import Fate, RuleDef, run_id
from zsched.rules.triggers import Cron, Every

T0 = 1_800_000_000_000  # a multiple of both periods: slot 0 of either rule


@dataclass(frozen=True)
class Rule:
    """The rule of the cells and its period `m` (ms)."""

    trigger: Any
    m: int

    @property
    def down_to(self) -> int:
        return T0 + 5 * self.m + 5  # slots 1..4 missed, slot 5 on time

    def rid(self, k: int) -> str:
        return run_id("r", T0 + k * self.m)

    def outcome(self, p: Pair, k: int) -> tuple[str, str]:
        (o,) = [(o, r) for s, o, r, _ in p.model.ledger if s == T0 + k * self.m]
        return o

    async def outage(self, real: Any, queue: str, misfire: str, overlap: str, first: float,
                     grace: float | None = None, cap: int = 3) -> Pair:  # fmt: skip
        """Slot 0 runs `first` periods, every other run half a period; the dispatchers are
        down from just after slot 0 until 5 ms after slot 5; then 10 periods pass. `grace`
        in periods."""
        m = self.m

        def fate_of(r: str, attempt: int) -> Fate:
            return Fate(int(first * m) if r == self.rid(0) else m // 2)

        grace_ms = None if grace is None else int(grace * m)
        defn = RuleDef("r", self.trigger, misfire=misfire, overlap=overlap, max_catch_up=cap,
                       grace_ms=grace_ms)  # fmt: skip
        p = Pair(real, queue, defn, fate_of, T0 - 1)
        await p.start()
        await p.do("advance_to", T0 + m // 60)
        await p.do("set_up", False)
        await p.do("advance_to", self.down_to)
        await p.do("set_up", True)
        await p.do("advance_to", self.down_to + 10 * m)
        return p


RULES = {
    "every-60s": Rule(Every(60), 60_000),
    "cron-20s": Rule(Cron("*/20 * * * * *", "UTC"), 20_000),
}


@pytest.fixture(params=sorted(RULES))
def rule(request: pytest.FixtureRequest) -> Rule:
    return RULES[request.param]


def starts(p: Pair) -> dict[str, int]:
    return {r: at for r, attempt, at in p.model.started if attempt == 1}


async def test_catch_up_allow_replays_start_at_once_beside_the_on_time_fire(real, queue, rule):
    p = await rule.outage(real, queue, "catch_up", "allow", 0.5)
    try:
        at = starts(p)
        assert {at[rule.rid(k)] for k in (2, 3, 4, 5)} == {rule.down_to}
        assert rule.outcome(p, 1) == ("skipped", "catch_up_cap")
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_catch_up_replays_run_one_after_another_and_none_is_dropped(
    real, queue, rule, overlap
):
    p = await rule.outage(real, queue, "catch_up", overlap, 0.5)
    try:
        at = starts(p)
        assert at[rule.rid(5)] == rule.down_to  # the on-time fire first
        assert at[rule.rid(2)] == rule.down_to + rule.m // 2  # when the on-time run ended
        assert all(rule.outcome(p, k) == ("ran_late", "") for k in (2, 3, 4))
        # Slot 6 (a period less 5 ms after the outage) meets replay 2, still running.
        if overlap == "skip":
            assert rule.outcome(p, 6) == ("skipped", f"overlap: {rule.rid(2)} still running")
            assert [at[rule.rid(3)], at[rule.rid(4)]] == [
                rule.down_to + rule.m,
                rule.down_to + 3 * rule.m // 2,
            ]
        else:
            assert rule.outcome(p, 6) == ("ran", f"queued behind {rule.rid(2)}")
            assert at[rule.rid(6)] == rule.down_to + rule.m  # when replay 2 ended, before replay 3
            assert at[rule.rid(3)] == rule.down_to + 3 * rule.m // 2
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_coalesce_runs_once_judged_against_a_run_from_before_the_outage(
    real, queue, rule, overlap
):
    p = await rule.outage(real, queue, "coalesce", overlap, 10)  # slot 0 runs until T0 + 10 P
    try:
        assert all(rule.outcome(p, k) == ("coalesced", f"into {rule.rid(5)}") for k in (1, 2, 3, 4))
        at = starts(p)
        if overlap == "allow":
            assert rule.outcome(p, 5) == ("ran", "") and at[rule.rid(5)] == rule.down_to
        elif overlap == "skip":
            assert rule.outcome(p, 5) == ("skipped", f"overlap: {rule.rid(0)} still running")
        else:
            assert rule.outcome(p, 5) == ("ran", f"queued behind {rule.rid(0)}")
            assert at[rule.rid(5)] == T0 + 10 * rule.m
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_skip_runs_only_the_on_time_fire(real, queue, rule, overlap) -> None:
    p = await rule.outage(real, queue, "skip", overlap, 10)
    try:
        assert all(rule.outcome(p, k) == ("skipped", "grace_passed") for k in (1, 2, 3, 4))
        want = {"allow": ("ran", ""),
                "skip": ("skipped", f"overlap: {rule.rid(0)} still running"),
                "queue": ("ran", f"queued behind {rule.rid(0)}")}[overlap]  # fmt: skip
        assert rule.outcome(p, 5) == want
    finally:
        await p.close()


#: misfire_grace (in periods) 0: slot 5, handled 5 ms late, is missed too; 1.5 (above the
#: interval): slot 4 (a period and 5 ms late) is on time beside slot 5. The default (half a
#: period) is the cases above.
ON_TIME = {0.0: [], 1.5: [4, 5]}


@pytest.mark.parametrize("grace", sorted(ON_TIME))
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
async def test_the_grace_decides_which_slots_are_missed(real, queue, rule, misfire, grace) -> None:
    """docs/policies.md: "Slots within the grace are simply on time and each fires"; the
    misfire policy decides about the others (catch_up keeps the newest max_catch_up=3)."""
    p = await rule.outage(real, queue, misfire, "allow", 0.5, grace=grace)
    try:
        on_time = ON_TIME[grace]
        late = [k for k in (1, 2, 3, 4, 5) if k not in on_time]
        assert all(rule.outcome(p, k) == ("ran", "") for k in on_time)
        if misfire == "catch_up":
            kept = late[-3:]
            assert all(rule.outcome(p, k) == ("ran_late", "") for k in kept)
            assert all(
                rule.outcome(p, k) == ("skipped", "catch_up_cap") for k in late if k not in kept
            )
        elif misfire == "coalesce":
            target = on_time[0] if on_time else late[-1]
            assert rule.outcome(p, target) == ("ran" if on_time else "ran_late", "")
            into = ("coalesced", f"into {rule.rid(target)}")
            assert all(rule.outcome(p, k) == into for k in late if k != target)
        else:
            assert all(rule.outcome(p, k) == ("skipped", "grace_passed") for k in late)
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_slots_on_time_together_meet_each_other_s_overlap(real, queue, rule, overlap) -> None:
    """A grace above the interval makes slots 4 and 5 on time in one pass: each is a new fire,
    so under skip/queue slot 5 meets slot 4's run (unlike catch-up replays, which never meet
    each other)."""
    p = await rule.outage(real, queue, "skip", overlap, 0.5, grace=1.5)
    try:
        assert rule.outcome(p, 4) == ("ran", "")
        want = {"skip": ("skipped", f"overlap: {rule.rid(4)} still running"),
                "queue": ("ran", f"queued behind {rule.rid(4)}")}[overlap]  # fmt: skip
        assert rule.outcome(p, 5) == want
    finally:
        await p.close()


@pytest.mark.parametrize("cap", [0, 1])
async def test_max_catch_up_keeps_the_newest_missed_slots(real, queue, rule, cap) -> None:
    """Slots 1-4 missed: max_catch_up=1 replays slot 4 only, 0 none; the rest catch_up_cap."""
    p = await rule.outage(real, queue, "catch_up", "allow", 0.5, cap=cap)
    try:
        kept = [4][:cap]
        assert all(rule.outcome(p, k) == ("ran_late", "") for k in kept)
        assert all(rule.outcome(p, k) == ("skipped", "catch_up_cap") for k in (1, 2, 3, 4)
                   if k not in kept)  # fmt: skip
        assert rule.outcome(p, 5) == ("ran", "")
    finally:
        await p.close()
