"""Instants, wall-clock times and DST transitions (pure calendar math, no I/O).

A recurring rule names local wall-clock times; the scheduler needs instants. Most wall times
are read exactly once. Around a transition a wall time is either *skipped* (it lies in a gap,
spring forward) or *repeated* (it lies in a fold, fall back). This module finds out which, and
turns a stream of matching wall times into the next fire instant under a gap policy
(`shift` or `skip`) and a repeat policy (`first` or `both`); see docs/policies.md.

Instants are integer epoch milliseconds. Wall times are naive datetimes. Aware datetimes are
never compared with each other here: Python compares two aware datetimes that share a tzinfo
by wall clock, ignoring `fold`, so 01:30 EDT == 01:30 EST.

Assumption: two transitions of one zone are further apart than the larger of their shifts
(true of every real zone since clocks were standardised).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from zsched.clock import datetime_to_ms
from zsched.clock import ms_to_datetime as from_ms
from zsched.errors import InvalidArgument, RuleError

_EPOCH_WALL = datetime(1970, 1, 1)
MS = timedelta(milliseconds=1)

#: The next wall time that the rule matches, strictly after the given wall time.
WallMatcher = Callable[[datetime], datetime]

GAP_SHIFT, GAP_SKIP = "shift", "skip"
REPEAT_FIRST, REPEAT_BOTH = "first", "both"


def is_fixed_time(*, minute: str, hour: str) -> bool:
    """Cronie's test: a rule is *fixed-time* unless its minute or hour field starts with `*`.

    So `30 2 * * *`, `0 9,17 * * 1-5` and `0 0-23/2 * * *` are fixed-time; `*/15 * * * *`,
    `0 */2 * * *` and `0 * * * *` are *wildcard* rules (they follow the clock as read).
    """
    return not (minute.startswith("*") or hour.startswith("*"))


def policy(fixed: bool, gap: str | None, repeat: str | None) -> tuple[str, str]:
    """The (gap, repeat) policy of a rule: the explicit values, else the defaults.

    Fixed-time rules default to (shift, first), as cron does for them; wildcard rules to
    (skip, both), which is what reading the clock every minute gives.
    """
    default_gap, default_repeat = (GAP_SHIFT, REPEAT_FIRST) if fixed else (GAP_SKIP, REPEAT_BOTH)
    return (
        _checked("dst_gap", gap, (GAP_SHIFT, GAP_SKIP), default_gap),
        _checked("dst_repeat", repeat, (REPEAT_FIRST, REPEAT_BOTH), default_repeat),
    )


def _checked(name: str, value: str | None, valid: tuple[str, str], default: str) -> str:
    if value is None:
        return default
    if value not in valid:
        raise RuleError(f"{name} must be one of {', '.join(valid)}; got {value!r}")
    return value


def to_ms(dt: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded down."""
    return datetime_to_ms(dt, floor=True)


def aware_ms(dt: datetime, where: str) -> int:
    """`to_ms` for a caller's datetime: naive ones are rejected, naming `where`."""
    if not isinstance(dt, datetime) or dt.utcoffset() is None:
        raise InvalidArgument(f"{where} needs an aware datetime, got {dt!r}")
    return to_ms(dt)


def iso_utc(ms: int) -> str:
    """ISO-8601 in UTC with a `Z`; milliseconds only when non-zero."""
    moment = from_ms(ms)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = moment.microsecond // 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def wall_at(zone: ZoneInfo, ms: int) -> datetime:
    """The local wall-clock reading (naive) at an instant."""
    return from_ms(ms).astimezone(zone).replace(tzinfo=None)


def _offset_ms(zone: ZoneInfo, ms: int) -> int:
    offset = from_ms(ms).astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has an offset
    return offset // MS


def _wall_from_ms(wall_ms: int) -> datetime:
    return _EPOCH_WALL + timedelta(milliseconds=wall_ms)


@dataclass(frozen=True, slots=True)
class Reading:
    """How one wall time maps to instants: `first` uses fold=0, `second` fold=1.

    Equal for an ordinary wall time. In a gap, fold=0 applies the offset from before the
    transition (PEP 495), which lands after it, so `first > second`. In a fold, `first` is
    the earlier occurrence, so `first < second`.
    """

    first_ms: int
    second_ms: int

    @property
    def skipped(self) -> bool:
        return self.first_ms > self.second_ms

    @property
    def repeated(self) -> bool:
        return self.first_ms < self.second_ms


def read(zone: ZoneInfo, wall: datetime) -> Reading:
    """Classify a naive wall time in `zone`."""
    return Reading(
        to_ms(wall.replace(tzinfo=zone, fold=0)), to_ms(wall.replace(tzinfo=zone, fold=1))
    )


@dataclass(frozen=True, slots=True)
class Shift:
    """One transition: the wall times in [start, end) are skipped (gap) or repeated (fold)."""

    at_ms: int  # the instant the clock jumps; after a gap it is "the first instant after it"
    start: datetime
    end: datetime
    after_offset_ms: int  # UTC offset in force from `at_ms` on


def shift_of(zone: ZoneInfo, reading: Reading) -> Shift:
    """The transition that makes `reading` skipped or repeated."""
    lo, hi = sorted((reading.first_ms, reading.second_ms))
    before = _offset_ms(zone, lo)
    at_s = _transition_s(zone, lo, hi, before)
    after = _offset_ms(zone, at_s * 1000)
    at_ms = at_s * 1000
    return Shift(
        at_ms=at_ms,
        start=_wall_from_ms(at_ms + min(before, after)),
        end=_wall_from_ms(at_ms + max(before, after)),
        after_offset_ms=after,
    )


def _transition_s(zone: ZoneInfo, lo_ms: int, hi_ms: int, before_ms: int) -> int:
    # Binary search in whole seconds: tzdata transitions fall on whole seconds, and the
    # bracket (lo, hi] is at most one shift wide, so this takes ~12 offset look-ups.
    lo, hi = lo_ms // 1000, -(-hi_ms // 1000)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_ms(zone, mid * 1000) == before_ms:
            lo = mid
        else:
            hi = mid
    return hi


def next_fire(
    zone: ZoneInfo, after: WallMatcher, ms: int, *, gap_shift: bool, repeat_both: bool
) -> int:
    """The first fire strictly after instant `ms` of a rule whose wall times `after` yields.

    Fires form two streams, each increasing with the wall time that causes it: the *first*
    stream (each wall time's first occurrence; a skipped one moved to the end of its gap, or
    dropped) and, with repeat_both, the *second* stream (the later occurrence of a repeated
    wall time). A second occurrence can precede the next first occurrence only while `ms`
    itself reads a repeated wall time, so the second stream is consulted only then.
    """
    wall = wall_at(zone, ms)
    here = read(zone, wall)
    fold = shift_of(zone, here) if here.repeated else None
    best = _next_first(zone, after, ms, wall, fold, gap_shift)
    if fold is not None and repeat_both:
        second = _next_second(zone, after, ms, fold)
        if second is not None and second < best:
            best = second
    return best


def _next_first(
    zone: ZoneInfo,
    after: WallMatcher,
    ms: int,
    wall: datetime,
    fold: Shift | None,
    gap_shift: bool,
) -> int:
    start = wall
    if fold is not None and ms >= fold.at_ms:
        # `ms` is in the repeated hour's second pass: every wall time before the fold's end
        # was first read before `ms`, so jump instead of walking through them one by one.
        start = fold.end - MS
    candidate = after(start)
    while True:
        reading = read(zone, candidate)
        if reading.skipped:
            gap = shift_of(zone, reading)
            if gap_shift and gap.at_ms > ms:
                return gap.at_ms
            candidate = after(gap.end - MS)
        elif reading.first_ms > ms:
            return reading.first_ms
        else:  # defensive: only reachable if two transitions sit closer than one shift
            candidate = after(candidate)


def _next_second(zone: ZoneInfo, after: WallMatcher, ms: int, fold: Shift) -> int | None:
    # A repeated wall time W is read again at W - after_offset; that is > ms exactly when
    # W > (ms read with the post-fold offset).
    floor = _wall_from_ms(ms + fold.after_offset_ms)
    candidate = after(max(floor, fold.start - MS))
    if candidate >= fold.end:
        return None
    return read(zone, candidate).second_ms
