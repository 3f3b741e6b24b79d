"""A rule's trigger history: the triggers an edit replaced, each with the span of time its
slots were the rule's, so the audit checks an old trigger's slots after an edit.

Stored in `QueueKeys.rule_triggers` (field schedule_id), written by schedule.lua with the
spec it belongs to (the compare-and-set of the edit covers it). The value is a msgpack array,
oldest first, of maps {v, trigger, valid_from_ms, valid_until_ms, gaps_checked_ms}
(docs/protocol.md): the trigger's slots in (valid_from_ms, valid_until_ms] were the rule's,
and `skipped: dst_gap` records were written up to gaps_checked_ms (nil: none are expected).
A rule edited before the history existed has none: its audit starts at the last edit.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from zsched.errors import RuleError
from zsched.rules.spec import Spec, State
from zsched.rules.triggers import Trigger, trigger_from_dict

#: Triggers kept per rule (the newest). Each is ~100-150 bytes; 16 cover a rule edited daily
#: for two weeks, and the audit looks back at most 30 days (the ledger's age) anyway.
MAX_TRIGGERS = 16
_VERSION = 1


@dataclass(frozen=True)
class Span:
    """One earlier trigger of a rule and when its slots were the rule's."""

    trigger: Trigger
    #: The trigger's slots in (valid_from_ms, valid_until_ms] were the rule's.
    valid_from_ms: int
    valid_until_ms: int
    #: Up to when its DST gaps were recorded (`dst_gap="skip"` cron rules); None: not audited.
    gaps_checked_ms: int | None = None

    def as_map(self) -> dict[str, object]:
        return {"v": _VERSION, "trigger": self.trigger.to_dict(),
                "valid_from_ms": self.valid_from_ms, "valid_until_ms": self.valid_until_ms,
                "gaps_checked_ms": self.gaps_checked_ms}  # fmt: skip


def decode(raw: bytes | None) -> list[Span]:
    """The stored history, oldest first ([] for none: a rule never edited, or an old one)."""
    if not raw:
        return []
    try:
        items = msgpack.unpackb(raw, raw=False)
        out = []
        for d in items:
            if d.get("v", _VERSION) != _VERSION:
                raise RuleError(f"unknown trigger history version {d.get('v')!r}")
            out.append(Span(trigger_from_dict(d["trigger"]), int(d["valid_from_ms"]),
                            int(d["valid_until_ms"]), d.get("gaps_checked_ms")))  # fmt: skip
        return out
    except RuleError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as exc:
        raise RuleError(f"stored trigger history cannot be read: {exc}") from exc


def readable(raw: bytes | None) -> tuple[list[Span], str | None]:
    """The stored history, or none when it cannot be read, and why. A corrupt history costs
    only the audit's reach into the old triggers' slots: its rule still fires, its current
    trigger is still audited and it can still be edited (the edit stores a fresh history), so
    the audit, the console and an edit go on without it instead of failing the rule."""
    try:
        return decode(raw), None
    except RuleError as exc:
        return [], str(exc)


def encode(spans: list[Span]) -> bytes:
    return msgpack.packb([s.as_map() for s in spans[-MAX_TRIGGERS:]], use_bin_type=True)  # type: ignore[no-any-return]


def replaced(old: Spec, state: State, old_next: int | None, now: int) -> Span:
    """The span of `old`'s slots that an edit at `now` ends. From when its slots were set
    (the audit's start for it); until `now`, or its next slot if that is already due (the
    edit fires it, under the new spec), or the pause (a paused rule's slots from then on are
    recorded at the resume, by the trigger then in force); clipped to start_at and end_at."""
    since = state.slots_from_ms if state.slots_from_ms is not None else state.updated_ms
    start = since if since is not None else (state.created_ms if state.created_ms is not None
                                             else now)  # fmt: skip
    if old.start_ms is not None:
        start = max(start, old.start_ms - 1)
    until = now
    if old_next is not None and old_next <= now:
        until = old_next
    if old.paused and state.paused_at_ms is not None:
        until = min(until, state.paused_at_ms - 1)
    if old.end_ms is not None:
        until = min(until, old.end_ms)
    return Span(old.trigger, start, max(start, until), state.gap_checked_ms)


def appended(raw: bytes | None, span: Span) -> bytes:
    """The stored history with `span` added (the oldest dropped past MAX_TRIGGERS); a history
    that cannot be read is replaced by `span` alone (`readable`)."""
    return encode([*readable(raw)[0], span])
