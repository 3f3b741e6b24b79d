"""The fire-ledger audit: recompute each rule's expected slots, independently of the
dispatcher, and report every slot past its grace that has no recorded outcome."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from zsched.clock import server_now_ms
from zsched.errors import RuleError
from zsched.rules import past_triggers
from zsched.rules.ledger import LEDGER_MAX_AGE_MS
from zsched.rules.past_triggers import Span
from zsched.rules.spec import Spec, State, decode_spec, decode_state, min_gap_ms
from zsched.rules.triggers import Cron, Trigger, trigger_from_dict

if TYPE_CHECKING:
    from zsched.context import QueueContext

log = logging.getLogger(__name__)

#: Slots checked per rule (the most recent ones).
MAX_AUDITED_SLOTS = 2000
#: Extra time past the grace before a slot without an outcome counts as unaccounted.
SLACK_MS = 5_000


@dataclass(frozen=True)
class AuditResult:
    schedule_id: str
    checked: int
    accounted: int
    waiting: int
    unaccounted: list[int] = field(default_factory=list)
    #: Why the rule's stored spec cannot be read (not audited then); None: it was read.
    unreadable: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def audit(ctx: QueueContext, now_ms: int | None = None) -> list[AuditResult]:
    """One result per rule. `unaccounted` lists slots that should have an outcome by now."""
    now = now_ms if now_ms is not None else server_now_ms(ctx.clock, ctx.redis)
    k, r = ctx.keys, ctx.redis
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(k.rules)
    pipe.hgetall(k.rule_state)
    pipe.hgetall(k.rule_triggers)
    specs, states, pasts = pipe.execute()
    results = []
    for raw_id, raw_spec in sorted(specs.items()):
        sid = raw_id.decode()
        try:
            spec, state = decode_spec(raw_spec), decode_state(states.get(raw_id))
        except RuleError as exc:  # one unreadable rule must not hide the others' audit
            results.append(AuditResult(sid, 0, 0, 0, unreadable=str(exc)))
            continue
        past, why = past_triggers.readable(pasts.get(raw_id))
        if why:  # the rule is fine: only its old triggers' slots go unchecked
            log.warning("schedule %s: %s; auditing its current trigger only", sid, why)
        results.append(check(sid, spec, state, r.xrange(k.ledger(sid)), now, past))
    return results


def check(schedule_id: str, spec: Spec, state: State, entries: list[Any], now_ms: int,
          past: Sequence[Span] = ()) -> AuditResult:  # fmt: skip
    """One rule against its ledger `entries` (XRANGE or XREVRANGE replies, any order), and
    `past`: its trigger history (past_triggers.decode; empty: the current trigger only)."""
    expected = _all_expected(spec, state, past, now_ms)
    seen = {int(f[b"slot_ms"]) for _, f in entries}
    ranges = [(int(f[b"slot_ms"]), int(f[b"last_ms"])) for _, f in entries if b"last_ms" in f]
    waiting = [s for s in expected if s in state.backlog]
    missing = [s for s in expected if s not in seen and s not in state.backlog
               and not any(lo <= s <= hi for lo, hi in ranges)]  # fmt: skip
    return AuditResult(schedule_id, len(expected), len(expected) - len(missing) - len(waiting),
                       len(waiting), missing)  # fmt: skip


def _all_expected(spec: Spec, state: State, past: Sequence[Span], now: int) -> list[int]:
    """The current trigger's slots since they were set, then, newest first while the budget
    of MAX_AUDITED_SLOTS lasts, each earlier trigger's over its own span (past_triggers)."""
    since, end = _bounds(spec, state, now)
    start = max(since, end - MAX_AUDITED_SLOTS * min_gap_ms(spec.trigger))
    out = _expected(spec.trigger, start, end, state.gap_checked_ms)
    budget = MAX_AUDITED_SLOTS - len(out)
    if start > since:  # the budget ends inside the current trigger's slots
        return out
    cut = since  # no earlier trigger's slot is audited past when the later one took over
    top = now - spec.misfire_grace_ms - SLACK_MS
    for span in reversed(past):
        if budget <= 0:
            break
        hi = min(span.valid_until_ms, top, cut)
        lo = max(span.valid_from_ms, now - LEDGER_MAX_AGE_MS)
        lo = max(lo, hi - budget * min_gap_ms(span.trigger))
        slots = _expected(span.trigger, lo, hi, span.gaps_checked_ms)[-budget:]
        out = slots + out
        budget -= len(slots)
        cut = min(cut, span.valid_from_ms)
    return out


def _bounds(spec: Spec, state: State, now: int) -> tuple[int, int]:
    """The current trigger's slots audited: since the rule's slots were last set (its
    creation, or an edit of its trigger, start_at or end_at; a state written before that was
    kept: its last write), at most the ledger's age, up to its grace plus SLACK_MS ago."""
    since = state.slots_from_ms if state.slots_from_ms is not None else state.updated_ms
    start = max(since or state.created_ms or now, now - LEDGER_MAX_AGE_MS)
    if spec.start_ms is not None:
        start = max(start, spec.start_ms - 1)
    end = now - spec.misfire_grace_ms - SLACK_MS
    if spec.end_ms is not None:
        end = min(end, spec.end_ms)
    if spec.paused and state.paused_at_ms is not None:
        end = min(end, state.paused_at_ms - 1)
    return start, end


def _expected(trig: Trigger, start: int, end: int, gaps_checked: int | None) -> list[int]:
    """The slots that need an outcome: the trigger's, and for a `dst_gap="skip"` cron rule
    the instants where a gap dropped one (recorded `skipped: dst_gap` when the rule next
    comes due: so only up to where the dispatcher has checked)."""
    if end <= start:
        return []
    own = trig.slots_between(start, end, MAX_AUDITED_SLOTS)
    if not isinstance(trig, Cron) or trig.dst_gap != "skip" or gaps_checked is None:
        return own
    # From the stored form: a rule stored before the cron syntax table is read as it was.
    shifted = trigger_from_dict({**trig.to_dict(), "dst_gap": "shift"})
    mine = set(own)
    upto = min(end, gaps_checked)
    gaps = [g for g in shifted.slots_between(start, upto, MAX_AUDITED_SLOTS) if g not in mine]
    return sorted(mine.union(gaps))
