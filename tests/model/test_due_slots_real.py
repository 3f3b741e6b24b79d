"""Cases the completeness check (tests/model/completeness.py) judges, on the real system and
the model at once (Pair compares them and runs the check at each step's end)."""

from __future__ import annotations

from tests.model.harness import Pair
from tests.model.rule_model import Fate, RuleDef
from zsched.rules.triggers import Every

M = 60_000
T0 = 1_800_000_000_000 // M * M


# Found by the completeness check: the real system and the model both left the old trigger's
# slot 1 min without an outcome (the pause started at that kept slot, and the resume records
# only the new trigger's slots). Now the pause records it `skipped: paused` (ops._pause_once).
async def test_a_slot_due_at_an_edit_during_an_outage_then_paused(real, queue) -> None:
    """Dispatchers down from 0.5 min; at 4.5 min the interval is edited to 90 s (slot 1 min,
    the stored next fire, is already due: "a slot already due fires under the new
    definition", and the 90 s slots go on after it); then the rule is paused before any
    dispatcher handled slot 1 min, and resumed at 8.5 min. Slot 1 min was due: it needs an
    outcome (`skipped: paused`, as every slot not handled when the rule was paused)."""
    rule = RuleDef("r", Every(60), misfire="skip")
    p = Pair(real, queue, rule, [Fate(0)], T0 - 1)
    try:
        await p.start()
        await p.do("advance_to", T0 + M // 2)
        await p.do("set_up", False)
        await p.do("advance_to", T0 + 4 * M + M // 2)
        await p.edit(trigger=Every(90))
        await p.do("pause")
        await p.do("advance_to", T0 + 8 * M + M // 2)
        await p.do("resume")
        await p.quiet(M)
    finally:
        await p.close()
