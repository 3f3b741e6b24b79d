"""How many slots a trigger has in a span, without listing them (pure calendar math).

A ledger range entry (a pause over 1,000 slots: ledger.skipped_range) is the outcome of
every slot it spans, and the `stats` counters count it as that many: a year of a 1 s rule is
31.5 million slots, too many to list, so they are counted in blocks. An `Every` is
arithmetic. A cron trigger's slots in a local minute, hour or day without a UTC offset change
are all the combinations of its lower fields (the day fields decide whole days), so a block
that starts at its first combination counts at once; only the partial blocks at the ends and
the blocks that hold an offset change are stepped slot by slot. A year of `* * * * * *` takes
about 700 next-slot computations.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from zsched.clock import ms_to_datetime
from zsched.rules import cronfields
from zsched.rules.triggers import Cron, Trigger

_UNITS = ((timedelta(days=1), 3), (timedelta(hours=1), 2), (timedelta(minutes=1), 1))


def count_between(trigger: Trigger, start_ms: int, end_ms: int) -> int:
    """The trigger's slots in (start_ms, end_ms]: len(slots_between) with no limit."""
    if end_ms <= start_ms:
        return 0
    if not isinstance(trigger, Cron):
        first = trigger.next_after_ms(start_ms)
        return 0 if first > end_ms else (end_ms - first) // trigger.interval_ms + 1
    zone = ZoneInfo(trigger.tz)
    firsts, sizes = _shape(trigger)
    n, t = 0, start_ms
    while (slot := trigger.next_after_ms(t)) <= end_ms:
        k, t = _block(zone, slot, end_ms, firsts, sizes)
        n += k
    return n


@functools.lru_cache(maxsize=256)
def _shape(cron: Cron) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The first (hour, minute, second) of a matching day, and the slots of a whole matching
    (day, hour, minute) without an offset change."""
    fields = cron.fields
    six = len(fields) == 6
    text = " ".join(cronfields.for_croniter(fields))
    expanded, _ = croniter.expand(text, second_at_beginning=six)

    def values(index: int, size: int) -> list[int]:
        got = expanded[index]
        return list(range(size)) if got == ["*"] else sorted(int(v) for v in got)

    minutes, hours = values(0, 60), values(1, 24)
    seconds = values(5, 60) if six else [0]
    per_minute = len(seconds)
    per_hour = per_minute * len(minutes)
    return (hours[0], minutes[0], seconds[0]), (per_hour * len(hours), per_hour, per_minute)


def _block(zone: ZoneInfo, slot: int, end_ms: int, firsts: tuple[int, int, int],
           sizes: tuple[int, int, int]) -> tuple[int, int]:  # fmt: skip
    """(slots, the instant counted up to) of the largest whole local day, hour or minute
    that starts at `slot` with its first combination, ends by end_ms and keeps one UTC
    offset; else (1, slot)."""
    local = ms_to_datetime(slot).astimezone(zone)
    wall = local.replace(tzinfo=None)
    at = (wall.hour, wall.minute, wall.second)
    for (unit, depth), size in zip(_UNITS, sizes, strict=True):
        if at[3 - depth :] != firsts[3 - depth :]:
            continue
        floor = wall.replace(second=0, microsecond=0)
        if depth >= 2:
            floor = floor.replace(minute=0)
        if depth == 3:
            floor = floor.replace(hour=0)
        last = slot + (floor + unit - wall) // timedelta(milliseconds=1) - 1
        if last <= end_ms and _offset(zone, last) == local.utcoffset():
            return size, last
    return 1, slot


def _offset(zone: ZoneInfo, ms: int) -> timedelta | None:
    return ms_to_datetime(ms).astimezone(zone).utcoffset()
