"""An outage of more than 1,000 slots (the dispatcher's MAX_SLOTS_PER_PASS): the real system
(racing dispatchers, a worker, the real redis-server) against the model, step by step
(tests/model/harness.Pair checks the ledger, the live runs and the lease after each). A rule
`every=1`, the dispatchers down 2,000 s: every missed slot gets one outcome, `catch_up`
replays the newest max_catch_up of the whole outage after the on-time fire, `coalesce`
names the run that stands for them all. (Review of issue 18, section 0.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.harness import Pair
from tests.model.rule_model import Fate, RuleDef
from zsched.rules.triggers import Every

T0 = 1_800_000_000_000
S = 1000
DOWN_S = 2000


#: Every pair with instant runs; catch_up with runs of 1.5 s (they outlast the interval), where
#: a replay started before the on-time fire took its lease (the defect).
CASES = [(m, o, 0) for m in ("catch_up", "coalesce", "skip") for o in ("allow", "skip", "queue")]
CASES += [("catch_up", "skip", 1500), ("catch_up", "queue", 1500)]


@pytest.mark.parametrize(("misfire", "overlap", "slow_ms"), CASES)
async def test_an_outage_of_2000_slots_of_a_one_second_rule(
    real: Any, queue: str, misfire: str, overlap: str, slow_ms: int
) -> None:  # fmt: skip
    rule = RuleDef("r", Every(1), misfire=misfire, overlap=overlap, max_catch_up=3)
    p = Pair(real, queue, rule, [Fate(slow_ms)], T0 - 1, dispatchers=2)
    try:
        await p.start()
        await p.do("advance_to", T0 + 500)
        await p.do("set_up", False)
        up_at = T0 + DOWN_S * S + 5
        await p.do("advance_to", up_at)
        await p.do("set_up", True)
        await p.do("advance_to", up_at + 6 * S)
        out = p.model.outcomes()
    finally:
        await p.close()
    # The model agreed with the real system at every step (Pair.check); what it says:
    missed, on_time = range(T0 + S, T0 + DOWN_S * S, S), T0 + DOWN_S * S
    assert out[on_time] == [("ran", "")]
    if misfire == "catch_up":
        # The newest 3 are replayed (under queue, slow runs keep them waiting: no outcome yet).
        kept = [s for s in missed if s not in out or out[s] == [("ran_late", "")]]
        assert kept == [on_time - 3 * S, on_time - 2 * S, on_time - S]
        assert (slow_ms and overlap == "queue") or all(s in out for s in kept)
        missed = range(T0 + S, on_time - 3 * S, S)
    assert all(len(out[s]) == 1 for s in missed)
    if misfire == "coalesce":
        into = "into r@2027-01-15T08:33:20Z"
        assert {out[s][0] for s in missed} == {("coalesced", into)}


async def test_two_long_outages_of_a_coalesce_rule_each_name_their_own_run(real: Any, queue: str):
    # The machine's counterexample (long_outage step, coalesce x queue): an outage of 1,001
    # slots (its last pass lists the on-time slot only) kept the name its first pass gave, and
    # the next long outage's slots were coalesced into that old run.
    rule = RuleDef("r", Every(1), misfire="coalesce", overlap="queue")
    p = Pair(real, queue, rule, [Fate(0)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0)  # down right after the slot at T0 ran: 1,000 missed + 1
        for down_s in (1001, 1500):
            await p.do("set_up", False)
            await p.do("advance_to", p.model.now + down_s * S)
            await p.do("set_up", True)
            await p.do("advance_to", p.model.now + 2 * S)
        into = {r for s, o, r, _ in p.model.ledger if o == "coalesced"}
        assert into == {"into r@2027-01-15T08:16:41Z", "into r@2027-01-15T08:41:43Z"}
    finally:
        await p.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_a_run_waiting_since_before_a_long_outage_holds_the_lease_through_all_its_passes(
    real: Any, queue: str, overlap: str
) -> None:  # fmt: skip
    # The machine's counterexample (long_outage, coalesce x queue, jitter): the run of the slot
    # before the outage waits in the delayed set (its jitter) holding the lease. The dispatcher
    # moved it to a worker between two passes of the outage, so the last pass found the lease
    # free and the on-time fire ran, where the model (one instant) has it meet that run.
    rule = RuleDef("r", Every(1), misfire="coalesce", overlap=overlap, jitter_ms=250)
    p = Pair(real, queue, rule, [Fate(0)], T0 - 1, workers=3)
    try:
        await p.start()
        await p.do("advance_to", T0)  # the slot at T0 fired, due a little later
        await p.do("set_up", False)
        await p.do("advance_to", T0 + 1500 * S + 5)
        await p.do("set_up", True)
        await p.do("advance_to", p.model.now + 2 * S)
        held = [o for s, o, r, _ in p.model.ledger if s == T0 + 1500 * S]
    finally:
        await p.close()
    assert held == (["ran"] if overlap == "queue" else ["skipped"])
