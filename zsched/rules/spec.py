"""Recurring rules in Redis: the stored spec and state, and the operations on them.

A rule's spec (what to run, when, with which policies) and its state (last slot, missed count,
catch-up backlog) are msgpack maps in per-queue hashes. Every change goes through a script:
`schedule` (upsert), `unschedule`, and `fire` (the dispatcher's compare-and-set).
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import msgpack

from zsched.clock import datetime_to_ms
from zsched.errors import RuleError, UnreadableRule
from zsched.protocol.envelope import Payload, check_payload
from zsched.protocol.limits import MAX_DURATION_MS, MAX_INSTANT_MS
from zsched.rules.policies import Misfire, Overlap
from zsched.rules.triggers import Cron, Every, Trigger, trigger_from_dict

#: The `lease` option's default (ms). Kept in specs and envelopes for compatibility; the overlap
#: lease itself has no TTL now: it lasts while its run lives (docs/policies.md).
DEFAULT_LEASE_MS = 600_000
DEFAULT_MAX_CATCH_UP = 100
MAX_GRACE_DEFAULT_MS = 60_000


def _ms(value: timedelta | float | int | None, name: str) -> int | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise RuleError(f"{name} must be a timedelta or seconds, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise RuleError(f"{name} must be finite and >= 0, got {value!r}")
    if seconds * 1000 > MAX_DURATION_MS:
        raise RuleError(f"{name} must be at most 1000 years, got {value!r}")
    return int(round(seconds * 1000))


def _instant_ms(value: datetime | float | None, name: str) -> int | None:
    """A rule's start_at/end_at in epoch ms: from 1970 (the scripts refuse negative instants,
    and an end_at before 1970 would make a rule that never fires) to the year 9999."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise RuleError(f"{name} {value.isoformat()} is naive; pass an aware datetime", name)
        ms = datetime_to_ms(value)
        if ms < 0:
            raise RuleError(f"{name} {value.isoformat()} is before 1970-01-01T00:00:00Z", name)
        return ms
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RuleError(f"{name} must be an aware datetime or epoch seconds, got {value!r}", name)
    if not 0 <= value * 1000 <= MAX_INSTANT_MS:
        raise RuleError(f"{name} must be epoch seconds from 1970 to the year 9999, got {value!r}",
                        name)  # fmt: skip
    return int(round(value * 1000))


#: A fixed instant to measure a rule's shortest period from, so the default is reproducible.
_REFERENCE_MS = 946_684_800_000  # 2000-01-01T00:00:00Z


@functools.lru_cache(maxsize=1024)
def min_gap_ms(trigger: Trigger) -> int:
    """The shortest gap between the rule's fires, measured from a fixed instant (cached: a
    trigger is a frozen value, and 12 cron fires cost ~0.3 ms; the audit asks per rule)."""
    slots = trigger.slots_between(_REFERENCE_MS, 2**53, 12)
    return min((b - a for a, b in zip(slots, slots[1:], strict=False)), default=120_000)


def default_grace_ms(trigger: Trigger) -> int:
    """Half the rule's shortest gap between fires, at most 60 s: at most one slot is on time
    at once, so the misfire policy decides what happens to every other late slot."""
    return max(1, min(MAX_GRACE_DEFAULT_MS, min_gap_ms(trigger) // 2))


@dataclass(frozen=True)
class Spec:
    """A recurring rule as stored in Redis."""

    schedule_id: str
    task: str
    trigger: Trigger
    payload: Payload = None
    misfire: Misfire = Misfire.COALESCE
    misfire_grace_ms: int = MAX_GRACE_DEFAULT_MS
    overlap: Overlap = Overlap.ALLOW
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    jitter_ms: int = 0
    start_ms: int | None = None
    end_ms: int | None = None
    paused: bool = False
    lease_ms: int = DEFAULT_LEASE_MS

    def encode(self) -> bytes:
        d = asdict(self)
        d["trigger"] = self.trigger.to_dict()
        d["misfire"], d["overlap"] = str(self.misfire), str(self.overlap)
        d["v"] = 1
        return msgpack.packb(d, use_bin_type=True)  # type: ignore[no-any-return]

    def first_slot_after(self, ms: int) -> int | None:
        """The first slot strictly after `ms` within [start, end], or None when the rule ended."""
        lo = ms if self.start_ms is None else max(ms, self.start_ms - 1)
        slot = self.trigger.next_after_ms(lo)
        return None if self.end_ms is not None and slot > self.end_ms else slot

    def describe(self) -> str:
        return self.trigger.describe()


def decode_spec(raw: bytes) -> Spec:
    try:
        d = msgpack.unpackb(raw, raw=False)
        d.pop("v", None)
        d["trigger"] = trigger_from_dict(d["trigger"])
        d["misfire"], d["overlap"] = Misfire.parse(d["misfire"]), Overlap.parse(d["overlap"])
        return Spec(**d)
    except RuleError:
        raise  # a ValueError too, already naming what is wrong
    except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as exc:
        raise RuleError(f"its stored spec does not decode: {_why(exc)}") from exc


def _why(exc: Exception) -> str:
    """An exception as a reason: its message, else its type (msgpack's often have none)."""
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class State:
    """What the dispatcher keeps about a rule between fires."""

    last_slot_ms: int | None = None
    last_fire_ms: int | None = None
    last_outcome: str | None = None
    missed: int = 0
    fired: int = 0
    backlog: list[int] = field(default_factory=list)
    paused_at_ms: int | None = None
    created_ms: int | None = None
    updated_ms: int | None = None
    #: Since when the rule's slots are those of its trigger, start_at and end_at (creation, or
    #: the last edit of one of them): the audit expects outcomes from here, not from the last
    #: write (a pause, a resume or a policy edit does not change which slots are due).
    slots_from_ms: int | None = None
    #: Up to when DST gaps were checked for wall times a `dst_gap="skip"` rule dropped.
    gap_checked_ms: int | None = None
    #: When pause_schedule paused the rule, the note it was given and who paused it (shown
    #: by list and in the ledger's `skipped: paused` entries).
    paused_ms: int | None = None
    pause_note: str | None = None
    paused_by: str | None = None
    #: Slots a backfill enqueued that the rule could still fire itself (a catch-up replay
    #: waiting, or a slot not yet handled): the rule records them `duplicate` instead, however
    #: long after the backfill, since `done` forgets a run after the dedupe window.
    backfilled: list[int] = field(default_factory=list)
    #: The slot whose run stands for the missed slots of a `coalesce` outage listed over
    #: several passes: named by the first pass, run by the last.
    coalesce_into_ms: int | None = None

    @property
    def catchup_head(self) -> int | None:
        """The oldest catch-up slot waiting (the rule's score in `rule_catchup`), or None."""
        return self.backlog[0] if self.backlog else None

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)  # type: ignore[no-any-return]


def decode_state(raw: bytes | None) -> State:
    """The stored state; RuleError when it is corrupt (not a msgpack map, or a field of the
    wrong type), so that one rule's bad state is that rule's error, not a failed pass."""
    if not raw:
        return State()
    try:
        d = msgpack.unpackb(raw, raw=False)
        if not isinstance(d, dict):
            raise TypeError(f"{type(d).__name__} instead of a map")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise RuleError(f"its stored state does not decode: {_why(exc)}") from exc
    known = {k: v for k, v in d.items() if k in State.__dataclass_fields__}
    for name, value in known.items():
        if not _typed(value, _state_types()[name]):
            raise RuleError(f"its stored state does not decode: {name} is {value!r:.80}")
    return State(**known)


#: What UnreadableRule's message suggests (docs/operations.md, "A rule a dispatcher cannot read").
REMEDY = "; remove it and create it again, or use the zsched that wrote it"


def decode_rule(schedule_id: str, raw_spec: bytes, raw_state: bytes | None, verb: str = "read"
                ) -> tuple[Spec, State]:  # fmt: skip
    """A stored rule's spec and state; UnreadableRule, `schedule <id> cannot be <verb>: <why>`,
    when either does not decode (the stored rule's fault, not a bad argument of the call)."""
    try:
        return decode_spec(raw_spec), decode_state(raw_state)
    except RuleError as exc:
        err = UnreadableRule(f"schedule {schedule_id} cannot be {verb}: {exc}{REMEDY}")
        err.reason = str(exc)
        raise err from exc


@functools.cache
def _state_types() -> dict[str, tuple[type, ...]]:
    """Each State field's types: `int | None` -> (int, NoneType), `list[int]` -> (list,)."""
    out = {}
    for name, hint in typing.get_type_hints(State).items():
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        out[name] = tuple(typing.get_origin(a) or a for a in args)
    return out


def _typed(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, list):  # the backlog and backfilled slots: lists of ints
        return list in allowed and all(_typed(v, (int,)) for v in value)
    return isinstance(value, allowed) and not isinstance(value, bool)


def build_spec(
    schedule_id: str,
    task_name: str,
    *,
    cron: str | Cron | None = None,
    every: float | timedelta | Every | None = None,
    tz: str | None = None,
    payload: Payload = None,
    misfire: str | Misfire = "coalesce",
    misfire_grace: timedelta | float | None = None,
    overlap: str | Overlap = "allow",
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    jitter: timedelta | float | None = None,
    start_at: datetime | float | None = None,
    end_at: datetime | float | None = None,
    paused: bool = False,
    lease: timedelta | float | None = None,
    dst_gap: str | None = None,
    dst_repeat: str | None = None,
) -> Spec:
    """Validate everything a rule is made of; RuleError names the bad part."""
    _check_names(schedule_id, task_name)
    start_ms = _instant_ms(start_at, "start_at")
    trigger = _trigger(schedule_id, cron, every, tz, dst_gap, dst_repeat, start_ms)
    bad = isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int)
    if bad or max_catch_up < 0 or max_catch_up > 1000:
        raise RuleError(
            f"schedule {schedule_id}: max_catch_up must be 0..1000, got {max_catch_up!r}"
        )
    end_ms = _instant_ms(end_at, "end_at")
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise RuleError(f"schedule {schedule_id}: end_at is before start_at", "end_at")
    try:
        check_payload(payload)
    except ValueError as exc:
        raise RuleError(f"schedule {schedule_id}: {exc}") from exc
    grace = _ms(misfire_grace, "misfire_grace")
    return Spec(
        schedule_id=schedule_id,
        task=task_name,
        trigger=trigger,
        payload=payload,
        misfire=Misfire.parse(misfire),
        misfire_grace_ms=grace if grace is not None else default_grace_ms(trigger),
        overlap=Overlap.parse(overlap),
        max_catch_up=max_catch_up,
        jitter_ms=_jitter_ms(schedule_id, trigger, jitter),
        start_ms=start_ms,
        end_ms=end_ms,
        paused=bool(paused),
        lease_ms=_lease_ms(schedule_id, lease),
    )


def _jitter_ms(schedule_id: str, trigger: Trigger, jitter: timedelta | float | None) -> int:
    """A jitter up to the rule's shortest period outside DST changes (a longer one would be
    cut at nearly every fire; plan.jitter_ms cuts it where DST shortens a gap)."""
    ms = _ms(jitter, "jitter") or 0
    gap = min_gap_ms(trigger)
    if ms > gap:
        raise RuleError(f"schedule {schedule_id}: jitter {ms / 1000:g}s is longer than the "
                        f"rule's shortest period ({gap / 1000:g}s)")  # fmt: skip
    return ms


def _lease_ms(schedule_id: str, lease: timedelta | float | None) -> int:
    ms = _ms(lease, "lease")
    if ms is None:
        return DEFAULT_LEASE_MS
    if ms < 1000:
        raise RuleError(f"schedule {schedule_id}: lease must be at least 1 second, got {lease!r}")
    return ms


def _check_names(schedule_id: str, task_name: str) -> None:
    if not isinstance(schedule_id, str) or not schedule_id or len(schedule_id.encode()) > 200:
        raise RuleError(f"schedule id must be 1..200 bytes, got {schedule_id!r}")
    if any(c in schedule_id for c in "@\n\r\0"):
        raise RuleError(f"schedule id {schedule_id!r} must not contain '@' or control characters")
    if not isinstance(task_name, str) or not task_name:
        raise RuleError(f"schedule {schedule_id}: task name must be a non-empty string")


def _trigger(schedule_id: str, cron: str | Cron | None, every: float | timedelta | Every | None,
             tz: str | None, dst_gap: str | None, dst_repeat: str | None,
             start_ms: int | None) -> Trigger:  # fmt: skip
    """The rule's trigger: a Cron in its zone, or an Every counted from start_ms. A ready
    Cron or Every object carries its own options, so giving them again is refused."""
    if (cron is None) == (every is None):
        raise RuleError(f"schedule {schedule_id}: give exactly one of cron= or every=")
    if isinstance(cron, Every) or isinstance(every, Cron):
        raise RuleError(f"schedule {schedule_id}: pass a Cron as cron= and an Every as every=")
    if isinstance(cron, Cron):
        if tz is not None or dst_gap or dst_repeat:
            raise RuleError(f"schedule {schedule_id}: tz and DST options belong in the Cron")
        return cron
    if cron is not None:
        return Cron(cron, tz, dst_gap=dst_gap, dst_repeat=dst_repeat)
    if tz is not None or dst_gap or dst_repeat:
        raise RuleError(f"schedule {schedule_id}: tz and DST options apply to cron rules only")
    if isinstance(every, Every):
        return _every_from(schedule_id, every, start_ms)
    return Every.from_ms(Every(every).interval_ms, start_ms or 0)


def _every_from(schedule_id: str, every: Every, start_ms: int | None) -> Every:
    # start_at= of the rule counts the slots, as for every=<seconds>; an Every made with its
    # own start_at keeps it, and a different start_at= beside it is a contradiction.
    if start_ms is None or start_ms == every.start_ms:
        return every
    if every.start_ms:
        raise RuleError(f"schedule {schedule_id}: start_at differs from the Every's start_at")
    return Every.from_ms(every.interval_ms, start_ms)


def with_paused(spec: Spec, paused: bool) -> Spec:
    return replace(spec, paused=paused)


@dataclass(frozen=True)
class ScheduleInfo:
    """A rule with its next and last fire, last outcome and missed count."""

    schedule_id: str
    task: str
    rule: str
    misfire: str
    overlap: str
    paused: bool
    next_fire_ms: int | None
    last_slot_ms: int | None
    last_fire_ms: int | None
    last_outcome: str | None
    missed: int
    fired: int
    catch_up_waiting: int
    #: A paused rule: when it was paused, the note given and who paused it (`by=`).
    paused_ms: int | None = None
    pause_note: str | None = None
    paused_by: str | None = None
    #: Why the stored spec cannot be read (corrupt, or written by a newer zsched): the rule
    #: does not fire until rewritten; task, rule and policies read "?". None: it was read.
    unreadable: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_options(spec: Spec) -> dict[str, Any]:
    """The keyword options that rebuild `spec` with build_spec (for edits)."""
    t = spec.trigger
    opts: dict[str, Any] = {
        "payload": spec.payload,
        "misfire": str(spec.misfire),
        "misfire_grace": spec.misfire_grace_ms / 1000,
        "overlap": str(spec.overlap),
        "max_catch_up": spec.max_catch_up,
        "jitter": spec.jitter_ms / 1000,
        "start_at": None if spec.start_ms is None else spec.start_ms / 1000,
        "end_at": None if spec.end_ms is None else spec.end_ms / 1000,
        "paused": spec.paused,
        "lease": spec.lease_ms / 1000,
    }
    if isinstance(t, Cron):
        opts.update(cron=t.expr, tz=t.tz, dst_gap=t.dst_gap, dst_repeat=t.dst_repeat)
    else:
        opts.update(every=t.interval_ms / 1000)
        if t.start_ms:
            opts["start_at"] = t.start_ms / 1000
    return opts
