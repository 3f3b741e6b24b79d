"""The reference model's own slot enumerator, written from docs/policies.md ("Time zones and
DST"), pure Python and zoneinfo: no croniter, nothing of zsched.rules.

- Cron: 5 fields (minute hour day-of-month month day-of-week), or 6 with the seconds first,
  or an alias; each field `*`, `?` (day fields), numbers, names (jan-dec, sun-sat), ranges
  `a-b` (`a-a` is the value a), steps `*/n`, `a-b/n`, `a/n` (from a to the field's end;
  the week ends on Saturday, 6, and `7/n` is `0/n`), lists. Day of week 0 and 7 are
  Sunday. `L` in the day of month, as an element of its list, is the month's last day. The
  fields are read on the zone's wall clock, dates included. When both day
  fields are restricted (anything but `*` or `?`; `*/2` and `*/1` count as restricted), a
  day matching either fires.
- A wildcard rule has a minute or hour field starting with `*`; every other one is
  fixed-time. Defaults: fixed-time dst_gap="shift", dst_repeat="first"; wildcard "skip",
  "both". A wall time in a gap: `shift` fires at the first instant after the gap (the
  transition instant), `skip` not at all. A repeated wall time: `first` at its first
  occurrence, `both` at both. Fires are instants: wall times that map to one instant are one
  fire.
- Every: `start_ms + k * interval_ms`, k >= 0.

Jitter is not part of a slot (it delays the fire, not the run id): the model applies it.

How: day by day over local dates, each matching wall time mapped to the instants at which the
zone's clock reads it, found by converting both ways (fold 0 and 1) and keeping the ones that
read back as that wall time; none means a gap, two a repeat. A gap's end is found by bisection
over milliseconds: the first instant whose wall time is past the one asked for.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}  # fmt: skip
MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
DAYS = "sun mon tue wed thu fri sat".split()
# (low, high, names) of second, minute, hour, day of month, month, day of week.
BOUNDS = [(0, 59, []), (0, 59, []), (0, 23, []), (1, 31, []), (1, 12, MONTHS), (0, 7, DAYS)]
EPOCH = datetime(1970, 1, 1)
DAY_MS = 86_400_000
# No zone's offset is beyond these (UTC-12 .. UTC+14): bounds of a local date's instants.
MARGIN_MS = 15 * 3_600_000


@dataclass(frozen=True)
class CronSpec:
    expr: str
    tz: str
    dst_gap: str | None = None  # None: the kind's default
    dst_repeat: str | None = None


@dataclass(frozen=True)
class EverySpec:
    interval_ms: int
    start_ms: int = 0


Spec = CronSpec | EverySpec


def spec_of(trigger: Any) -> Spec:
    """A product trigger (zsched.rules.triggers.Cron/Every) read as data only: its expression,
    zone and DST choices in force, or its interval and start; none of its methods."""
    if hasattr(trigger, "interval_ms"):
        return EverySpec(trigger.interval_ms, trigger.start_ms)
    return CronSpec(trigger.expr, trigger.tz, trigger.dst_gap, trigger.dst_repeat)


def slots_between(trigger: Any, lo: int, hi: int, limit: int) -> list[int]:
    """Slots in (lo, hi], oldest first, at most `limit`."""
    out: list[int] = []
    for s in iter_slots(trigger, lo):
        if s > hi or len(out) >= limit:
            break
        out.append(s)
    return out


def first_after(trigger: Any, ms: int) -> int | None:
    return next(iter(iter_slots(trigger, ms)), None)


def iter_slots(trigger: Any, lo: int) -> Iterator[int]:
    spec = trigger if isinstance(trigger, CronSpec | EverySpec) else spec_of(trigger)
    if isinstance(spec, EverySpec):
        k = 0 if lo < spec.start_ms else (lo - spec.start_ms) // spec.interval_ms + 1
        while True:
            yield spec.start_ms + k * spec.interval_ms
            k += 1
    else:
        yield from _cron_slots(spec, lo)


# -- cron fields ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    doms: frozenset[int]
    dom_last: bool  # `L`: the month's last day
    months: frozenset[int]
    dows: frozenset[int]  # 0 = Sunday
    dom_any: bool
    dow_any: bool
    fixed: bool


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> Parsed:
    text = ALIASES.get(expr.strip().lower(), expr.strip())
    fields = text.split()
    assert len(fields) in (5, 6), f"cron {expr!r}: 5 or 6 fields"
    if len(fields) == 5:
        fields = ["0", *fields]
    dom_parts = fields[3].lower().split(",")
    last, doms = "l" in dom_parts, ",".join(p for p in dom_parts if p != "l")
    sets = [
        _field(f, *b) if f else set()
        for f, b in zip([*fields[:3], doms, *fields[4:]], BOUNDS, strict=True)
    ]
    minute, hour = fields[1], fields[2]
    return Parsed(
        tuple(sorted(sets[0])), tuple(sorted(sets[1])), tuple(sorted(sets[2])),
        frozenset(sets[3]), last, frozenset(sets[4]), frozenset(d % 7 for d in sets[5]),
        dom_any=fields[3] in ("*", "?"), dow_any=fields[5] in ("*", "?"),
        fixed=not (minute.startswith("*") or hour.startswith("*")),
    )  # fmt: skip


def _field(text: str, low: int, high: int, names: list[str]) -> set[int]:
    values: set[int] = set()
    for part in text.lower().split(","):
        rng, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if rng in ("*", "?"):
            a, b = low, min(high, 6) if names is DAYS else high
        elif "-" in rng:
            a_text, b_text = rng.split("-")
            a, b = _value(a_text, low, names), _value(b_text, low, names)
        else:
            a = _value(rng, low, names)
            if step_text and names is DAYS:
                # `a/n` runs to the week's end, Saturday (6); `7/n` is Sunday's, `0/n`.
                a, b = a % 7, 6
            else:
                b = high if step_text else a
        assert low <= a <= b <= high and step > 0, f"cron field {text!r}"
        values.update(range(a, b + 1, step))
    return values


def _value(text: str, low: int, names: list[str]) -> int:
    if text in names:
        return names.index(text) + low
    return int(text)


def _day_matches(p: Parsed, d: date) -> bool:
    if d.month not in p.months:
        return False
    last = p.dom_last and (d + timedelta(days=1)).month != d.month
    dom, dow = d.day in p.doms or last, (d.weekday() + 1) % 7 in p.dows
    if p.dom_any and p.dow_any:
        return True
    if p.dom_any:
        return dow
    if p.dow_any:
        return dom
    return dom or dow


# -- wall times to instants ----------------------------------------------------------------


def _ms(dt: datetime) -> int:
    """Epoch ms of an aware datetime, or of a naive one read as UTC."""
    base = EPOCH if dt.tzinfo is None else datetime(1970, 1, 1, tzinfo=UTC)
    return (dt - base) // timedelta(milliseconds=1)


def _wall(zone: ZoneInfo, ms: int) -> datetime:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return at.astimezone(zone).replace(tzinfo=None)


def occurrences(zone: ZoneInfo, wall: datetime) -> list[int]:
    """The instants at which the zone's clock reads `wall`, oldest first (none: a gap)."""
    cands = {_ms(wall.replace(tzinfo=zone, fold=f)) for f in (0, 1)}
    return sorted(t for t in cands if _wall(zone, t) == wall)


def gap_end(zone: ZoneInfo, wall: datetime) -> int:
    """The first instant whose wall time is past `wall` (a wall time in a gap)."""
    a, b = (_ms(wall.replace(tzinfo=zone, fold=f)) for f in (0, 1))
    lo, hi = min(a, b) - DAY_MS // 2, max(a, b) + DAY_MS // 2
    assert _wall(zone, lo) < wall < _wall(zone, hi)
    while hi - lo > 1:  # invariant: wall(lo) < wall < wall(hi)
        mid = (lo + hi) // 2
        if _wall(zone, mid) > wall:
            hi = mid
        else:
            lo = mid
    return hi


def policy(spec: CronSpec) -> tuple[str, str]:
    fixed = parse(spec.expr).fixed
    gap = spec.dst_gap or ("shift" if fixed else "skip")
    repeat = spec.dst_repeat or ("first" if fixed else "both")
    return gap, repeat


@functools.lru_cache(maxsize=512)
def _day_offsets(expr: str) -> tuple[int, ...]:
    """The rule's wall times within a day, as ms after midnight, ascending."""
    p = parse(expr)
    return tuple(h * 3_600_000 + m * 60_000 + s * 1000
                 for h in p.hours for m in p.minutes for s in p.seconds)  # fmt: skip


# The model asks about the same days again and again (each pass, edit, resume): cache them.
@functools.lru_cache(maxsize=8192)
def _day_fires(spec: CronSpec, d: date) -> tuple[int, ...]:
    if not _day_matches(parse(spec.expr), d):
        return ()
    zone = ZoneInfo(spec.tz)
    gap, repeat = policy(spec)
    midnight = datetime(d.year, d.month, d.day)
    base, offsets = _ms(midnight), _day_offsets(spec.expr)
    start, end = occurrences(zone, midnight), occurrences(zone, midnight + timedelta(days=1))
    off = base - start[0] if len(start) == 1 else None
    if off is not None and len(end) == 1 and off == base + DAY_MS - end[0]:
        # One offset all day (two transitions within a day that cancel out: no real zone).
        return tuple(base - off + x for x in offsets)
    fires: set[int] = set()
    for x in offsets:
        w = midnight + timedelta(milliseconds=x)
        times = occurrences(zone, w)
        if not times:
            if gap == "shift":
                fires.add(gap_end(zone, w))
        else:
            fires.update(times if repeat == "both" else times[:1])
    return tuple(sorted(fires))


def _utc_date(ms: int) -> date:
    return (EPOCH + timedelta(milliseconds=ms)).date()


def _cron_slots(spec: CronSpec, lo: int) -> Iterator[int]:
    """Fires > lo in order: local dates from two days before lo's, emitting a buffered fire
    once no later date can produce an earlier one."""
    d = _utc_date(lo) - timedelta(days=2)
    heap: list[int] = []
    last = lo
    while True:
        fires = _day_fires(spec, d)
        for f in fires[bisect.bisect_right(fires, lo) :]:
            heapq.heappush(heap, f)
        d += timedelta(days=1)
        safe = _ms(datetime(d.year, d.month, d.day, tzinfo=UTC)) - MARGIN_MS
        while heap and heap[0] < safe:
            f = heapq.heappop(heap)
            if f > last:
                last = f
                yield f
