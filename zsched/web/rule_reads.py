"""The console's bounded reads of rules: a page of rules, one rule, and the fire-ledger audit a
few rules at a time (zsched/web/reads.py holds the other bounded reads).

A rule whose stored spec or state this zsched cannot decode (corrupt, or written by a newer
zsched) is reported as unreadable, with why, never raised: one such rule must not break a
page for the others. What needs it decoded (an edit, a simulation, a rule's own page) gets
UnreadableRule from `rule`, which names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsched.errors import UnreadableRule
from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import lossy_text
from zsched.rules.ops import load, unreadable_info
from zsched.rules.spec import ScheduleInfo, Spec, State, decode_rule
from zsched.web.reads import PAGE_MAX

#: HSCAN steps (of ~100 rules each) one search of rules by id may take.
MATCH_STEPS = 10
#: Rules audited per overview read of a partition (the audit rotates through them).
AUDIT_BATCH = 20
#: Newest ledger entries read per audited rule.
AUDIT_LEDGER_MAX = 4000


def decoded(sid: str, raw_spec: bytes, raw_state: bytes | None) -> tuple[Spec, State] | str:
    """The rule's spec and state, or why they cannot be read."""
    try:
        return decode_rule(sid, raw_spec, raw_state)
    except UnreadableRule as exc:
        return exc.reason


# -- rules, page by page ------------------------------------------------------------------------


@dataclass(frozen=True)
class RulesPage:
    #: Each rule's info and spec; spec None: the rule cannot be read (info.unreadable: why).
    rules: list[tuple[ScheduleInfo, Spec | None]]
    next_cursor: int
    total: int


def rules_page(r: Any, k: QueueKeys, cursor: int = 0, match: str = "") -> RulesPage:
    """About PAGE_MAX rules: one HSCAN step of the `rules` hash (COUNT 100; Redis may return a
    few more; a search by id prefix takes up to MATCH_STEPS steps), then their state, next
    fire and last ledger entry in one pipeline. Hash order, sorted by id within the page;
    next_cursor 0 = last page."""
    pattern = _glob_escape(match) + "*" if match else None
    nxt, specs = r.hscan(k.rules, cursor, match=pattern, count=PAGE_MAX)
    steps = 1
    # A MATCH can leave a step empty: take a few more steps (bounded) before showing a page.
    while match and len(specs) < PAGE_MAX and int(nxt) and steps < MATCH_STEPS:
        nxt, more = r.hscan(k.rules, nxt, match=pattern, count=PAGE_MAX)
        specs.update(more)
        steps += 1
    ids = sorted(lossy_text(m) for m in specs)
    pipe = r.pipeline(transaction=False)
    pipe.hlen(k.rules)
    if ids:
        pipe.hmget(k.rule_state, ids)
        pipe.zmscore(k.rule_next, ids)
        for sid in ids:
            pipe.xrevrange(k.ledger(sid), "+", "-", count=1)
    total, *rest = pipe.execute()
    if not ids:
        return RulesPage([], int(nxt), int(total))
    states, nexts, lasts = rest[0], rest[1], rest[2:]
    out: list[tuple[ScheduleInfo, Spec | None]] = []
    for sid, raw_state, nx, last in zip(ids, states, nexts, lasts, strict=True):
        outcome = lossy_text(last[0][1].get(b"outcome", b"")) if last else None
        nx = None if nx is None else int(nx)
        got = decoded(sid, specs[sid.encode()], raw_state)
        if isinstance(got, str):  # its own row, saying why; the others as usual
            out.append((unreadable_info(sid, nx, outcome, got), None))
            continue
        spec, state = got
        info = ScheduleInfo(
            sid, spec.task, spec.describe(), str(spec.misfire), str(spec.overlap), spec.paused,
            nx, state.last_slot_ms, state.last_fire_ms, outcome,
            state.missed, state.fired, len(state.backlog),
            paused_ms=state.paused_ms, pause_note=state.pause_note, paused_by=state.paused_by,
        )  # fmt: skip
        out.append((info, spec))
    return RulesPage(out, int(nxt), int(total))


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def rule(app: Any, schedule_id: str) -> tuple[Spec, State, int | None]:
    """A rule's spec, state and next fire (three reads). Raises ScheduleNotFound, and
    UnreadableRule when it cannot be read."""
    spec, state, _raw, _raw_state, nxt = load(app.ctx, schedule_id)
    return spec, state, nxt


# -- the fire-ledger audit, a few rules at a time -------------------------------------------------


@dataclass(frozen=True)
class AuditBatch:
    """One step of the rotating audit: where the next starts, and what it found."""

    next_cursor: int
    #: {schedule_id: unaccounted slots} of every rule audited (0: clean).
    unaccounted: dict[str, int]
    #: {schedule_id: why} of the rules of the step that cannot be read (not audited).
    unreadable: dict[str, str]


def audit_rules(app: Any, cursor: int, now_ms: int) -> AuditBatch:
    """zsched.rules.audit's check over one HSCAN step of rules (about AUDIT_BATCH): slots past
    their grace with no outcome among each rule's newest AUDIT_LEDGER_MAX ledger entries."""
    r, k = app.redis, app.keys
    nxt, specs = r.hscan(k.rules, cursor, count=AUDIT_BATCH)
    ids = sorted(specs)
    if not ids:
        return AuditBatch(int(nxt), {}, {})
    pipe = r.pipeline(transaction=False)
    pipe.hmget(k.rule_state, ids)
    pipe.hmget(k.rule_triggers, ids)
    for raw_id in ids:
        pipe.xrevrange(k.ledger(lossy_text(raw_id)), "+", "-", count=AUDIT_LEDGER_MAX)
    states, pasts, *ledgers = pipe.execute()
    out = AuditBatch(int(nxt), {}, {})
    for raw_id, raw_state, raw_past, ledger in zip(ids, states, pasts, ledgers, strict=True):
        sid = lossy_text(raw_id)
        got = decoded(sid, specs[raw_id], raw_state)
        if isinstance(got, str):  # one unreadable rule must not fail the overview
            out.unreadable[sid] = got
        else:
            out.unaccounted[sid] = len(unaccounted(*got, ledger, now_ms, raw_past))
    return out


def audit_rule(app: Any, schedule_id: str, spec: Spec, state: State, now_ms: int) -> list[int]:
    """One rule's slots past their grace with no outcome (its newest AUDIT_LEDGER_MAX entries)."""
    pipe = app.redis.pipeline(transaction=False)
    pipe.xrevrange(app.keys.ledger(schedule_id), "+", "-", count=AUDIT_LEDGER_MAX)
    pipe.hget(app.keys.rule_triggers, schedule_id)
    ledger, raw_past = pipe.execute()
    return unaccounted(spec, state, ledger, now_ms, raw_past)


def unaccounted(spec: Spec, state: State, ledger: list[Any], now_ms: int,
                raw_past: bytes | None = None) -> list[int]:  # fmt: skip
    """zsched.rules.audit's check of one rule against the ledger entries read (and its
    trigger history as stored, `rule_triggers`)."""
    from zsched.rules.audit import check
    from zsched.rules.past_triggers import readable

    # A corrupt history: the current trigger's slots only (the rule itself is fine).
    past = readable(raw_past)[0]
    return check(spec.schedule_id, spec, state, ledger, now_ms, past).unaccounted
