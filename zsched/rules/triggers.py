"""Triggers of recurring rules: when a rule fires (pure calendar math, no I/O).

`Cron` names local wall-clock times in an IANA zone; `Every` counts absolute time. Both give
the next fire strictly after an instant, as epoch milliseconds (`next_after_ms`, the
dispatcher's hot path) or as an aware UTC datetime (`next_after`). How a cron trigger behaves
across DST transitions is decided here and in `zsched.rules.dst`; the policy is in
docs/policies.md ("Time zones and DST").
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from zsched.clock import ms_to_datetime
from zsched.errors import RuleError
from zsched.protocol.limits import MAX_INSTANT_MS
from zsched.rules import cronfields, dst
from zsched.rules.policies import Misfire as Misfire  # re-exported (their home before)
from zsched.rules.policies import Overlap as Overlap

#: What `to_dict` returns and `trigger_from_dict` reads: msgpack-able scalars only.
TriggerDict = dict[str, str | int | None]
#: Deprecated alias of TriggerDict (its name before issue #17).
RuleDict = TriggerDict

# Any fixed start works for the "does it ever fire" probe: every valid cron pattern repeats
# within croniter's 50-year search window. A fixed value keeps construction deterministic.
_PROBE_START = datetime(2000, 1, 1)
_DICT_VERSION = 1
_EVERY_UNITS = ("weeks", "days", "hours", "minutes", "milliseconds")


class TriggerProtocol(Protocol):
    """What the dispatcher needs from a rule's trigger (`Cron`, `Every`)."""

    def next_after(self, dt: datetime) -> datetime:
        """The first fire strictly after the aware datetime `dt`, as an aware UTC datetime."""

    def next_after_ms(self, ms: int) -> int:
        """The first fire strictly after epoch milliseconds `ms`."""

    def slots_between(self, start_ms: int, end_ms: int, limit: int) -> list[int]:
        """Fires in (start_ms, end_ms], oldest first, at most `limit` of them."""

    def to_dict(self) -> TriggerDict:
        """A msgpack-able dict that `trigger_from_dict` turns back into an equal trigger."""

    def describe(self) -> str:
        """A short human description."""


class _Base:
    """The parts of TriggerProtocol that follow from `next_after_ms`."""

    def next_after_ms(self, ms: int) -> int:
        raise NotImplementedError

    def next_after(self, dt: datetime) -> datetime:
        return ms_to_datetime(self.next_after_ms(dst.aware_ms(dt, "next_after()")))

    def slots_between(self, start_ms: int, end_ms: int, limit: int) -> list[int]:
        slots: list[int] = []
        slot = self.next_after_ms(start_ms)
        while slot <= end_ms and len(slots) < limit:
            slots.append(slot)
            slot = self.next_after_ms(slot)
        return slots


@dataclass(frozen=True, init=False)
class Cron(_Base):
    """A cron trigger read on the wall clock of an IANA zone.

    `expr` has 5 fields (minute hour day-of-month month day-of-week), 6 fields with the
    seconds FIRST, or is an alias (@hourly @daily @midnight @weekly @monthly @yearly
    @annually). When day-of-month and day-of-week are both restricted, either may match.
    `tz` is required ("UTC" for UTC). DST: see `fixed_time`, docs/policies.md.
    """

    expr: str
    tz: str
    dst_gap: str
    dst_repeat: str
    _zone: ZoneInfo = field(repr=False, compare=False)
    _matcher: Any = field(repr=False, compare=False)  # croniter, which is untyped
    _fixed: bool = field(repr=False, compare=False)

    def __init__(
        self,
        expr: str,
        tz: str | None = None,
        *,
        dst_gap: str | None = None,
        dst_repeat: str | None = None,
    ) -> None:
        self._build(expr, tz, dst_gap, dst_repeat, stored=False)

    def _build(self, expr: str, tz: str | None, dst_gap: str | None, dst_repeat: str | None,
               *, stored: bool) -> None:  # fmt: skip
        fields = cronfields.split(expr, stored=stored)
        zone = _zone(tz, expr)
        fixed = dst.is_fixed_time(minute=fields[-5], hour=fields[-4])
        gap, repeat = dst.policy(fixed, dst_gap, dst_repeat)
        put = object.__setattr__
        put(self, "expr", " ".join(expr.split()))
        put(self, "tz", zone.key)
        put(self, "dst_gap", gap)
        put(self, "dst_repeat", repeat)
        put(self, "_zone", zone)
        put(self, "_matcher", _matcher(fields))
        put(self, "_fixed", fixed)

    @property
    def fields(self) -> tuple[str, ...]:
        """The expression's fields, an alias spelled out (5, or 6 with the seconds first)."""
        return cronfields.split(self.expr, stored=True)  # checked when built

    @property
    def fixed_time(self) -> bool:
        """True unless the minute or the hour field starts with `*` (cronie's distinction).

        Fixed-time rules default to dst_gap="shift", dst_repeat="first"; the others
        ("wildcard" rules) to dst_gap="skip", dst_repeat="both".
        """
        return self._fixed

    def next_after_ms(self, ms: int) -> int:
        # croniter keeps its position in the object; a shallow copy per call is cheap and
        # makes one Cron safe to share between threads.
        matcher = copy.copy(self._matcher)

        def after(wall: datetime) -> datetime:
            nxt: datetime = matcher.get_next(datetime, start_time=wall)
            return nxt

        return dst.next_fire(
            self._zone,
            after,
            ms,
            gap_shift=self.dst_gap == dst.GAP_SHIFT,
            repeat_both=self.dst_repeat == dst.REPEAT_BOTH,
        )

    def to_dict(self) -> TriggerDict:
        return {
            "v": _DICT_VERSION,
            "kind": "cron",
            "expr": self.expr,
            "tz": self.tz,
            "dst_gap": self.dst_gap,
            "dst_repeat": self.dst_repeat,
        }

    def describe(self) -> str:
        text = f"cron '{self.expr}' in {self.tz}"
        if (self.dst_gap, self.dst_repeat) != dst.policy(self._fixed, None, None):
            text += f" (DST gap {self.dst_gap}, repeat {self.dst_repeat})"
        return text


@dataclass(frozen=True, init=False)
class Every(_Base):
    """A fixed interval in absolute time (DST never matters), whole milliseconds.

    Slots are start_at + k * interval for k >= 0; the first slot is `start_at` (an aware
    datetime or epoch seconds; default: the epoch, so slots are aligned to multiples of the
    interval). `Every.from_ms` takes whole milliseconds, as stored. Give the interval as seconds,
    a timedelta, or keywords: `Every(600)`, `Every(timedelta(minutes=10))`, `Every(minutes=10)`.
    """

    interval_ms: int
    start_ms: int

    def __init__(
        self,
        seconds: float | timedelta | None = None,
        *,
        start_at: datetime | float | None = None,
        **kw: float,
    ) -> None:
        interval_ms = _round_ms(_interval(seconds, kw))
        if interval_ms <= 0:
            raise RuleError(f"interval must be at least 1 ms, got {interval_ms} ms")
        object.__setattr__(self, "interval_ms", interval_ms)
        object.__setattr__(self, "start_ms", _start_ms(start_at))

    @classmethod
    def from_ms(cls, interval_ms: int, start_ms: int = 0) -> Every:
        """An Every from whole milliseconds (stored rules' triggers, the wire)."""
        _start_in_range(start_ms, f"{start_ms} ms")
        return cls(timedelta(milliseconds=interval_ms), start_at=ms_to_datetime(start_ms))

    def next_after_ms(self, ms: int) -> int:
        if ms < self.start_ms:
            return self.start_ms
        return self.start_ms + ((ms - self.start_ms) // self.interval_ms + 1) * self.interval_ms

    def slots_between(self, start_ms: int, end_ms: int, limit: int) -> list[int]:
        first = self.next_after_ms(start_ms)
        count = max(0, min(limit, (end_ms - first) // self.interval_ms + 1))
        return [first + k * self.interval_ms for k in range(count)]

    def to_dict(self) -> TriggerDict:
        return {
            "v": _DICT_VERSION,
            "kind": "every",
            "interval_ms": self.interval_ms,
            "start_ms": self.start_ms,
        }

    def describe(self) -> str:
        text = f"every {_human_ms(self.interval_ms)}"
        if self.start_ms:
            text += f" from {dst.iso_utc(self.start_ms)}"
        return text


#: A rule's trigger: when it fires (a cron expression in a zone, or a fixed interval).
Trigger = Cron | Every
#: Deprecated alias of Trigger (its name before issue #17; a rule is the whole stored spec).
Rule = Trigger


def trigger_from_dict(d: object) -> Trigger:
    """Rebuild a trigger from `to_dict` output (as read back from msgpack), validating it."""
    if not isinstance(d, dict):
        raise RuleError(f"a trigger dict must be a dict, got {type(d).__name__}")
    if d.get("v", _DICT_VERSION) != _DICT_VERSION:
        raise RuleError(f"unknown trigger dict version {d.get('v')!r}")
    kind = d.get("kind")
    try:
        if kind == "cron":
            cron = Cron.__new__(Cron)  # stored: maybe by a zsched before the syntax table
            cron._build(d["expr"], d["tz"], d["dst_gap"], d["dst_repeat"], stored=True)
            return cron
        if kind == "every":
            interval_ms, start_ms = d["interval_ms"], d["start_ms"]
            if not _is_int(interval_ms) or not _is_int(start_ms):
                raise RuleError(f"interval_ms and start_ms must be integers in {d!r}")
            return Every.from_ms(interval_ms, start_ms)
    except KeyError as exc:
        raise RuleError(f"{kind} trigger dict lacks {exc}") from exc
    raise RuleError(f"unknown trigger kind {kind!r}; valid: 'cron', 'every'")


#: Deprecated alias of trigger_from_dict (its name before issue #17).
rule_from_dict = trigger_from_dict


def slot_run_id(schedule_id: str, slot_ms: int) -> str:
    """The run id of one fire: `<schedule_id>@<slot as UTC ISO-8601>`.

    E.g. `nightly@2026-03-29T01:00:00Z`; milliseconds appear only when non-zero.
    """
    return f"{schedule_id}@{dst.iso_utc(slot_ms)}"


def _matcher(fields: tuple[str, ...]) -> Any:
    text = " ".join(cronfields.for_croniter(fields))
    seconds_first = len(fields) == 6
    try:
        matcher = croniter(text, _PROBE_START, day_or=True, second_at_beginning=seconds_first)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise RuleError(_bad_field_message(fields, exc)) from exc
    try:
        copy.copy(matcher).get_next(datetime, start_time=_PROBE_START)
    except CroniterBadDateError as exc:
        raise RuleError(
            f"cron {text!r} never fires: no date matches its day-of-month, month and "
            "day-of-week fields"
        ) from exc
    return matcher


def _bad_field_message(fields: tuple[str, ...], exc: Exception) -> str:
    # croniter names the whole expression; find the field by testing each one alone.
    names = cronfields.NAMED[6 - len(fields) :]
    for index, (name, value) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[index] = value
        try:
            croniter.expand(" ".join(probe), second_at_beginning=len(fields) == 6)
        except (ValueError, TypeError, KeyError, IndexError):
            return f"cron {' '.join(fields)!r}: bad {name} field {value!r}"
    return f"cron {' '.join(fields)!r} is invalid: {exc}"


def _zone(tz: object, expr: object) -> ZoneInfo:
    if tz is None:
        raise RuleError(
            f"cron {expr!r} needs a time zone: pass an IANA name such as 'Europe/Berlin', "
            "or 'UTC' for UTC"
        )
    if not isinstance(tz, str):
        raise RuleError(f"time zone must be an IANA name string, got {tz!r}")
    if tz in ("localtime", "posixrules") or tz.startswith(("posix/", "right/", "/")):
        # Files of the local tz database, not zone names: "localtime" is each machine's own
        # zone, and right/ zones count leap seconds, so replicas would disagree on slots.
        raise RuleError(f"time zone {tz!r} is not an IANA zone name: name the zone, e.g. "
                        "'Europe/Berlin'")  # fmt: skip
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise RuleError(f"unknown time zone {tz!r}") from exc


def _is_int(value: object, *, or_float: bool = False) -> bool:
    kinds = (int, float) if or_float else (int,)
    return isinstance(value, kinds) and not isinstance(value, bool)


def _interval(seconds: float | timedelta | None, kw: dict[str, float]) -> timedelta:
    unknown = sorted(set(kw) - set(_EVERY_UNITS))
    if unknown:
        units = ", ".join(_EVERY_UNITS)
        raise RuleError(f"Every() got unknown unit {unknown[0]!r}; valid: seconds, {units}")
    if seconds is None and not kw:
        raise RuleError("Every() needs an interval: seconds, a timedelta or a unit keyword")
    base = seconds if isinstance(seconds, timedelta) else timedelta()
    amounts = (
        dict(kw)
        if seconds is None or isinstance(seconds, timedelta)
        else {"seconds": seconds, **kw}
    )
    for unit, amount in amounts.items():
        if not (_is_int(amount, or_float=True) and math.isfinite(amount)):
            raise RuleError(f"interval {unit} must be a finite number, got {amount!r}")
    try:
        return base + timedelta(**amounts)
    except OverflowError as exc:
        raise RuleError(f"interval is too large: {amounts!r}") from exc


def _round_ms(value: timedelta) -> int:
    # Integer arithmetic: a float division would lose microseconds on large intervals.
    whole_ms, rest_us = divmod(value // timedelta(microseconds=1), 1000)
    return whole_ms + (rest_us >= 500)


def _start_ms(start_at: datetime | float | None) -> int:
    if start_at is None:
        return 0
    if isinstance(start_at, datetime):
        if start_at.utcoffset() is None:
            raise RuleError(f"start_at must be an aware datetime, got naive {start_at!r}")
        return _start_in_range(_round_ms(start_at - ms_to_datetime(0)), start_at.isoformat())
    # Epoch seconds, as everywhere in the Python API (app.schedule, enqueue's run_at).
    if isinstance(start_at, int | float) and not isinstance(start_at, bool):
        if not math.isfinite(start_at):
            raise RuleError(f"start_at must be finite epoch seconds, got {start_at!r}")
        return _start_in_range(int(round(start_at * 1000)), f"{start_at!r} epoch seconds")
    raise RuleError(f"start_at must be an aware datetime or epoch seconds, got {start_at!r}")


def _start_in_range(ms: int, shown: str) -> int:
    # The scripts and the wire take instants from 1970 to the year 9999 (protocol/limits.py);
    # refused here, by name, rather than as a Redis error or an OverflowError at a later read.
    if ms < 0:
        raise RuleError(f"start_at {shown} is before 1970-01-01T00:00:00Z", "start_at")
    if ms > MAX_INSTANT_MS:
        raise RuleError(f"start_at {shown} is after the year 9999", "start_at")
    return ms


def _human_ms(ms: int) -> str:
    parts: list[str] = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if ms:
        parts.append(f"{ms / 1000:g}s")
    return "".join(parts)
