"""The ledger's outcome names live once, in zsched/rules/ledger.py: every outcome a script
writes is an Outcome, the Python fires name theirs with it, and the values are the wire's."""

from __future__ import annotations

import re

from zsched.rules import ledger
from zsched.rules.ledger import Outcome
from zsched.rules.plan import plan
from zsched.rules.spec import State, build_spec
from zsched.store.scripts import lua_dir


def test_every_outcome_a_script_writes_is_a_ledger_outcome() -> None:
    written = set()
    for name in ("fire", "backfill"):
        src = (lua_dir() / f"{name}.lua").read_text()
        written |= set(re.findall(r"record\(\w+, '(\w+)'", src))
        written |= set(re.findall(r"'outcome', '(\w+)'", src))
    assert written == {"duplicate", "skipped", "backfilled"}
    assert written <= {o.value for o in Outcome}


def test_outcomes_are_their_wire_strings() -> None:
    assert [str(o) for o in Outcome] == ["ran", "ran_late", "skipped", "coalesced", "duplicate",
                                         "backfilled", "manual"]  # fmt: skip
    assert "ran" in ledger.HAS_RUN and "backfilled" in ledger.HAS_RUN
    assert "skipped" not in ledger.HAS_RUN and "coalesced" not in ledger.HAS_RUN


def test_a_plan_names_its_fires_and_records_with_ledger_outcomes() -> None:
    spec = build_spec("r", "t", every=60, misfire="skip", misfire_grace=1)
    p = plan(spec, State(), 0, 5 * 60_000, budget=10)
    assert [f[2] for f in p.fires] == [Outcome.RAN]
    assert {r[1] for r in p.records} == {Outcome.SKIPPED}
    assert all(r[2] == "grace_passed" and r[3].startswith("r@") for r in p.records)
