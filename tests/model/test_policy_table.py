"""Each cell of docs/policies.md's misfire x overlap table, on the real system and the model
at once (Pair checks they agree after every step and keeps the ledger invariants)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.harness import Pair
from tests.model.rule_model import Fate, RuleDef, run_id
from zsched.rules.triggers import Every

M = 60_000
T0 = 1_800_000_000_000
DOWN_TO = T0 + 5 * M + 5  # slots 1..4 missed, slot 5 on time


def rid(k: int) -> str:
    return run_id("r", T0 + k * M)


async def _outage(real: Any, queue: str, misfire: str, overlap: str, first_s: int,
                  grace_ms: int | None = None, cap: int = 3) -> Pair:  # fmt: skip
    """Slot 0 runs `first_s` seconds, every other run 30 s; the dispatchers are down from just
    after slot 0 until 5 ms after slot 5; then 10 minutes pass."""

    def fate_of(r: str, attempt: int) -> Fate:
        return Fate(first_s * 1000 if r == rid(0) else 30_000)

    rule = RuleDef("r", Every(60), misfire=misfire, overlap=overlap, max_catch_up=cap,
                   grace_ms=grace_ms)  # fmt: skip
    p = Pair(real, queue, rule, fate_of, T0 - 1)
    await p.start()
    await p.do("advance_to", T0 + 1000)
    await p.do("set_up", False)
    await p.do("advance_to", DOWN_TO)
    await p.do("set_up", True)
    await p.do("advance_to", DOWN_TO + 10 * M)
    return p


def starts(p: Pair) -> dict[str, int]:
    return {r: at for r, attempt, at in p.model.started if attempt == 1}


def outcome(p: Pair, k: int) -> tuple[str, str]:
    (o,) = [(o, r) for s, o, r, _ in p.model.ledger if s == T0 + k * M]
    return o


async def test_catch_up_allow_replays_start_at_once_beside_the_on_time_fire(real, queue):
    p = await _outage(real, queue, "catch_up", "allow", 30)
    try:
        at = starts(p)
        assert {at[rid(k)] for k in (2, 3, 4, 5)} == {DOWN_TO}
        assert outcome(p, 1) == ("skipped", "catch_up_cap")
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_catch_up_replays_run_one_after_another_and_none_is_dropped(real, queue, overlap):
    p = await _outage(real, queue, "catch_up", overlap, 30)
    try:
        at = starts(p)
        assert at[rid(5)] == DOWN_TO  # the on-time fire first
        assert at[rid(2)] == DOWN_TO + 30_000  # when the on-time run ended
        assert all(outcome(p, k) == ("ran_late", "") for k in (2, 3, 4))
        # Slot 6 (55 s after the outage) meets replay 2, still running.
        if overlap == "skip":
            assert outcome(p, 6) == ("skipped", f"overlap: {rid(2)} still running")
            assert [at[rid(3)], at[rid(4)]] == [DOWN_TO + 60_000, DOWN_TO + 90_000]
        else:
            assert outcome(p, 6) == ("ran", f"queued behind {rid(2)}")
            assert at[rid(6)] == DOWN_TO + 60_000  # when replay 2 ended, before replay 3
            assert at[rid(3)] == DOWN_TO + 90_000
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_coalesce_runs_once_judged_against_a_run_from_before_the_outage(real, queue,
                                                                             overlap):  # fmt: skip
    p = await _outage(real, queue, "coalesce", overlap, 600)  # slot 0 runs until T0 + 10 min
    try:
        assert all(outcome(p, k) == ("coalesced", f"into {rid(5)}") for k in (1, 2, 3, 4))
        at = starts(p)
        if overlap == "allow":
            assert outcome(p, 5) == ("ran", "") and at[rid(5)] == DOWN_TO
        elif overlap == "skip":
            assert outcome(p, 5) == ("skipped", f"overlap: {rid(0)} still running")
        else:
            assert outcome(p, 5) == ("ran", f"queued behind {rid(0)}")
            assert at[rid(5)] == T0 + 600_000
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["allow", "skip", "queue"])
async def test_skip_runs_only_the_on_time_fire(real, queue, overlap) -> None:
    p = await _outage(real, queue, "skip", overlap, 600)
    try:
        assert all(outcome(p, k) == ("skipped", "grace_passed") for k in (1, 2, 3, 4))
        want = {"allow": ("ran", ""), "skip": ("skipped", f"overlap: {rid(0)} still running"),
                "queue": ("ran", f"queued behind {rid(0)}")}[overlap]  # fmt: skip
        assert outcome(p, 5) == want
    finally:
        await p.close()


#: misfire_grace 0: slot 5, handled 5 ms late, is missed too; 90 s (above the interval):
#: slot 4 (60,005 ms late) is on time beside slot 5. The default (30 s) is the cases above.
ON_TIME = {0: [], 90_000: [4, 5]}


@pytest.mark.parametrize("grace_ms", sorted(ON_TIME))
@pytest.mark.parametrize("misfire", ["catch_up", "coalesce", "skip"])
async def test_the_grace_decides_which_slots_are_missed(real, queue, misfire, grace_ms) -> None:
    """docs/policies.md: "Slots within the grace are simply on time and each fires"; the
    misfire policy decides about the others (catch_up keeps the newest max_catch_up=3)."""
    p = await _outage(real, queue, misfire, "allow", 30, grace_ms=grace_ms)
    try:
        on_time = ON_TIME[grace_ms]
        late = [k for k in (1, 2, 3, 4, 5) if k not in on_time]
        assert all(outcome(p, k) == ("ran", "") for k in on_time)
        if misfire == "catch_up":
            kept = late[-3:]
            assert all(outcome(p, k) == ("ran_late", "") for k in kept)
            assert all(outcome(p, k) == ("skipped", "catch_up_cap") for k in late if k not in kept)
        elif misfire == "coalesce":
            target = on_time[0] if on_time else late[-1]
            assert outcome(p, target) == ("ran" if on_time else "ran_late", "")
            into = ("coalesced", f"into {rid(target)}")
            assert all(outcome(p, k) == into for k in late if k != target)
        else:
            assert all(outcome(p, k) == ("skipped", "grace_passed") for k in late)
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_slots_on_time_together_meet_each_other_s_overlap(real, queue, overlap) -> None:
    """A grace above the interval makes slots 4 and 5 on time in one pass: each is a new fire,
    so under skip/queue slot 5 meets slot 4's run (unlike catch-up replays, which never meet
    each other)."""
    p = await _outage(real, queue, "skip", overlap, 30, grace_ms=90_000)
    try:
        assert outcome(p, 4) == ("ran", "")
        want = {"skip": ("skipped", f"overlap: {rid(4)} still running"),
                "queue": ("ran", f"queued behind {rid(4)}")}[overlap]  # fmt: skip
        assert outcome(p, 5) == want
    finally:
        await p.close()


@pytest.mark.parametrize("cap", [0, 1])
async def test_max_catch_up_keeps_the_newest_missed_slots(real, queue, cap) -> None:
    """Slots 1-4 missed: max_catch_up=1 replays slot 4 only, 0 none; the rest catch_up_cap."""
    p = await _outage(real, queue, "catch_up", "allow", 30, cap=cap)
    try:
        kept = [4][:cap]
        assert all(outcome(p, k) == ("ran_late", "") for k in kept)
        assert all(outcome(p, k) == ("skipped", "catch_up_cap") for k in (1, 2, 3, 4)
                   if k not in kept)  # fmt: skip
        assert outcome(p, 5) == ("ran", "")
    finally:
        await p.close()
