"""What cron syntax a rule accepts: docs/policies.md's table ("Fields"), row by row. croniter
reads more (`L`, `W`, `#`, backwards ranges, H, R); zsched refuses it when the rule is given,
naming the field and the construct. The accepted rows are checked against the reference
model's enumerator in tests/model/test_slots_vs_triggers.py."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from zsched.errors import InvalidArgument, RuleError
from zsched.rules import audit
from zsched.rules.plan import plan
from zsched.rules.spec import State, build_spec
from zsched.rules.triggers import Cron, slot_run_id, trigger_from_dict

DOC = Path(__file__).parents[3] / "docs" / "policies.md"


def syntax_table() -> list[tuple[str, list[str], bool]]:
    """(construct, examples, accepted) of each row of the doc's cron syntax table."""
    text = DOC.read_text()
    body = text.split("<!-- cron-syntax-table -->")[1].split("<!-- /cron-syntax-table -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        construct, examples, accepted = (c.strip() for c in line.strip("|").split("|"))
        rows.append((construct, re.findall(r"`([^`]+)`", examples), accepted.startswith("yes")))
    return rows


ROWS = syntax_table()


def test_the_table_has_both_kinds_of_rows() -> None:
    assert sum(ok for *_, ok in ROWS) >= 9 and sum(not ok for *_, ok in ROWS) >= 9


@pytest.mark.parametrize(("construct", "examples", "accepted"), ROWS, ids=[r[0] for r in ROWS])
def test_each_row_of_the_doc_table_is_accepted_or_refused_as_it_says(
    construct: str, examples: list[str], accepted: bool
) -> None:
    for expr in examples:
        if accepted:
            assert Cron(expr, "Europe/Berlin").next_after_ms(0) > 0, expr
        else:
            with pytest.raises(RuleError):
                Cron(expr, "Europe/Berlin")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 22-2 * * *", "hour field '22-2': the range 22-2 runs backwards.*write 22-23,0-2"),
        ("50-10 * * * *", "minute field '50-10': the range 50-10 runs backwards.*50-59,0-10"),
        ("50-10 * * * * *", "second field '50-10': the range 50-10 runs backwards"),
        ("0 0 2-1 * *", "day-of-month field '2-1': the range 2-1 runs backwards"),
        ("0 0 * nov-feb *", "month field 'nov-feb': the range nov-feb runs backwards"),
        ("0 0 * * fri-mon", "day-of-week field 'fri-mon': the range fri-mon runs backwards"),
        ("0 0 * * 5-1", "day-of-week field '5-1': .*write 5-6,0-1"),
        ("0 0 * * 7-1", "day-of-week field '7-1': .*write 0-1"),
        ("0 22-2/2 * * *", "hour field '22-2/2': the range 22-2 runs backwards.*as a list"),
        ("0 0 1-L * *", "day-of-month field '1-L': 'L' \\(the month's last day\\) stands alone"),
        ("0 0 L-2 * *", "day-of-month field 'L-2': 'L' \\(the month's last day\\) stands alone"),
        ("0 0 1-5,L/2 * *", "day-of-month field '1-5,L/2': 'L'"),
        ("0 0 LW * *", "day-of-month field 'LW': 'L'"),
        ("0 0 * * 5L", "day-of-week field '5L': 'L' \\(the last weekday of the month\\) is not"),
        ("0 0 * * L5", "day-of-week field 'L5': 'L' \\(the last weekday"),
        ("0 0 * * L", "day-of-week field 'L': 'L' \\(the last weekday"),
        ("0 0 * * mon,L", "day-of-week field 'mon,L': 'L'"),
        ("0 0 15W * *", "day-of-month field '15W': 'W' \\(the nearest weekday\\)"),
        ("0 0 1w * *", "day-of-month field '1w': 'W'"),
        ("0 0 * * 1#2", "day-of-week field '1#2': '#' \\(the nth weekday of the month\\)"),
        ("0 0 * * sun#1", "day-of-week field 'sun#1': '#'"),
        ("0 0 0 * * 5#3", "day-of-week field '5#3': '#'"),
        ("H * * * *", "minute field 'H': H \\(hashed\\) and R \\(random\\)"),
        ("0 0 R * * *", "hour field 'R': H \\(hashed\\)"),
        ("H(0-29) * * * *", "minute field 'H\\(0-29\\)': H \\(hashed\\)"),
        ("0 0 0 1 1 * 2027", "7 fields.*a year field is not supported"),
        ("@every 5m", "unknown cron alias '@every 5m'"),
        ("@reboot", "unknown cron alias '@reboot'"),
        ("0 0 * * monday", "bad day-of-week field 'monday'"),
        ("0 0 1 january *", "bad month field 'january'"),
        ("? * * * *", "bad minute field '\\?'"),
        ("0 L * * *", "bad hour field 'L'"),
    ],
)
def test_croniter_syntax_beyond_the_doc_is_refused_naming_the_field_and_the_construct(
    expr: str, message: str
) -> None:
    with pytest.raises(RuleError, match=message) as caught:
        Cron(expr, "UTC")
    assert isinstance(caught.value, InvalidArgument) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("expr", ["0 ² * * *", "0 ²-1 * * *", "0 1-² * * *", "0 0 * * ٣-١"])
def test_digits_that_are_not_ascii_are_a_rule_error(expr: str) -> None:
    # str.isdigit() is true for them: int() raised a bare ValueError on '²' (also on main, in
    # an equal-range check), and '٣-١' read as the backwards range 3-1.
    with pytest.raises(RuleError, match="bad (hour|day-of-week) field"):
        Cron(expr, "UTC")


def test_names_that_contain_l_or_w_are_still_names() -> None:
    # jul, wed: the L and W checks look at whole tokens, not letters.
    assert Cron("0 0 * jul wed", "UTC").next_after_ms(0) > 0
    assert Cron("0 0 * jun-jul/1 tue-wed", "UTC").next_after_ms(0) > 0


@pytest.mark.parametrize(
    ("backwards", "written"),
    [("0 22-2 * * *", "0 22-23,0-2 * * *"), ("0 0 * * 5-1", "0 0 * * 5-6,0-1"),
     ("0 0 * * fri-mon", "0 0 * * fri-6,0-mon"), ("0 0 * nov-feb *", "0 0 * nov-12,1-feb *")],
)  # fmt: skip
def test_the_rewrite_a_backwards_range_error_suggests_is_accepted(
    backwards: str, written: str
) -> None:
    (field,) = [w for b, w in zip(backwards.split(), written.split(), strict=True) if b != w]
    with pytest.raises(RuleError, match=f"write {re.escape(field)} "):
        Cron(backwards, "UTC")
    assert Cron(written, "UTC").next_after_ms(0) > 0


def test_l_alone_in_the_day_of_month_is_the_last_day_of_the_month() -> None:
    rule = Cron("0 0 l * *", "UTC")
    got = [rule.next_after_ms(0)]
    for _ in range(3):
        got.append(rule.next_after_ms(got[-1]))
    assert [g // 86_400_000 for g in got] == [30, 58, 89, 119]  # 1970-01-31, 02-28, 03-31, 04-30


def test_the_refusal_holds_for_app_schedule() -> None:
    with pytest.raises(RuleError, match="day-of-month field 'LW'"):
        build_spec("r", "t", cron="0 0 LW * *", tz="UTC")


#: A rule stored by a zsched before the syntax table, which accepted croniter's wrap-around:
#: Friday to Monday, 02:30 in Berlin; 2026-03-29 (a Sunday) has no 02:30.
STORED = {"v": 1, "kind": "cron", "expr": "30 2 * * fri-mon", "tz": "Europe/Berlin",
          "dst_gap": "skip", "dst_repeat": "first"}  # fmt: skip


def _utc(*a: int) -> int:
    return int(datetime(*a, tzinfo=UTC).timestamp() * 1000)


def test_a_rule_stored_before_the_table_is_read_and_fires_as_it_did() -> None:
    """docs/policies.md: such a rule is read as it was (a dispatcher that could not read it
    would skip it, and pass again at once: its slot stays due)."""
    trig = trigger_from_dict(STORED)
    got = trig.slots_between(_utc(2026, 1, 1), 2**53, 5)  # 2026-01-01 is a Thursday
    assert got == [_utc(2026, 1, d, 1, 30) for d in (2, 3, 4, 5, 9)]
    assert trigger_from_dict(trig.to_dict()) == trig
    with pytest.raises(RuleError, match="H \\(hashed\\)"):  # never stored: refused as always
        trigger_from_dict({**STORED, "expr": "H 2 * * *"})


def test_a_stored_rule_of_the_old_syntax_gets_its_dst_gap_record_and_audit() -> None:
    # plan() and the audit rebuild the trigger with dst_gap="shift" to find the gap's
    # instant: from the stored form, or a RuleError would stop the rule at its gap.
    spec = dataclasses.replace(build_spec("y", "t", cron="30 2 * * *", tz="Europe/Berlin"),
                               trigger=trigger_from_dict(STORED))  # fmt: skip
    prev = _utc(2026, 3, 28, 1, 30)  # Saturday 02:30 CET
    nxt = spec.trigger.next_after_ms(prev)
    assert nxt == _utc(2026, 3, 30, 0, 30)  # Monday 02:30 CEST
    state = State(created_ms=prev - 60_000, gap_checked_ms=prev, last_slot_ms=prev)
    p = plan(spec, state, nxt, nxt + 5, budget=100)
    gap_end = _utc(2026, 3, 29, 1)
    assert (gap_end, "skipped", "dst_gap", slot_run_id("y", gap_end), gap_end) in p.records
    done = dataclasses.replace(state, gap_checked_ms=nxt)
    assert gap_end in audit.check("y", spec, done, [], nxt + 3_600_000).unaccounted
