"""Clocks. Scheduling decisions use Redis TIME inside scripts; a Clock is injected for tests.

`SystemClock.now_ms()` returns None, which tells every script wrapper to let the script read
the server's TIME (one clock for all dispatchers, whatever their skew). `FakeClock` returns a
pinned instant that the wrappers pass as `now_ms`, so tests move time without sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

#: The instant 0 of every `*_ms` field: 1970-01-01T00:00:00Z.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)


def ms_to_datetime(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds (exact: no float on the way; positional
    seconds and microseconds, the quickest way to build it: the worker does it per run)."""
    return EPOCH + timedelta(0, ms // 1000, ms % 1000 * 1000)


def datetime_to_ms(dt: datetime, *, floor: bool = False) -> int:
    """Epoch milliseconds of an aware datetime: the nearest (halves up), or with `floor` the
    one at or before it (a trigger's "strictly after" needs that). Exact integer arithmetic;
    the caller rejects naive datetimes first, naming its argument."""
    if floor:
        return (dt - EPOCH) // _MS
    return ((dt - EPOCH) // _US + 500) // 1000


def time_reply_us(reply: Any) -> int:
    """Epoch microseconds of a Redis TIME reply (seconds, microseconds), also the first two
    items of a script reply that starts with it (status.lua)."""
    return int(reply[0]) * 1_000_000 + int(reply[1])


def time_reply_ms(reply: Any) -> int:
    """Epoch milliseconds of a Redis TIME reply, rounded down (as the scripts round)."""
    return time_reply_us(reply) // 1000


def server_now_ms(clock: Clock, redis: Any) -> int:
    """Now on the one clock (DESIGN.md invariant 3): the injected clock's instant, else the
    Redis server's TIME read with the sync client `redis`."""
    now = clock.now_ms()
    if now is not None:
        return now
    return time_reply_ms(redis.time())


class Clock(Protocol):
    """Where "now" comes from for scheduling decisions."""

    def now_ms(self) -> int | None:
        """Epoch milliseconds, or None to use the Redis server's TIME."""
        ...


class SystemClock:
    """The production clock: defer to Redis TIME."""

    def now_ms(self) -> int | None:
        return None


class FakeClock:
    """A pinned clock for tests; move it with `advance` or `set`."""

    def __init__(self, now_ms: int) -> None:
        self._now_ms = int(now_ms)

    def now_ms(self) -> int:
        return self._now_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = int(now_ms)

    def advance(self, ms: int) -> None:
        self._now_ms += int(ms)


#: How often a process measures its offset from the Redis server's clock again.
OFFSET_REFRESH_S = 60.0


class ServerTime:
    """The Redis server's clock read from this process: local wall time plus an offset
    measured with TIME (half the round trip taken as the one-way delay). For the times a
    process must stamp itself (an envelope's due, a start lag): DESIGN.md invariant 3."""

    def __init__(self, clock: Clock, refresh_s: float = OFFSET_REFRESH_S) -> None:
        self.clock = clock
        self.refresh_s = refresh_s
        self.offset_ms: float | None = None
        self._measured_at = float("-inf")

    def stale(self) -> bool:
        """Whether a measurement is due (never with an injected clock)."""
        if self.clock.now_ms() is not None:
            return False
        return time.monotonic() - self._measured_at >= self.refresh_s

    def learn(self, reply: tuple[Any, Any], sent_ms: float, received_ms: float) -> None:
        """Take a TIME reply sent at `sent_ms` and answered at `received_ms` (local wall ms)."""
        server_ms = time_reply_us(reply) / 1000
        self.offset_ms = server_ms - (sent_ms + received_ms) / 2
        self._measured_at = time.monotonic()

    def measure(self, redis: Any) -> None:
        """Measure with a sync client; a refused or odd reply keeps the last offset."""
        sent = time.time() * 1000
        try:
            reply = redis.time()
        except Exception:  # noqa: BLE001 - an ACL without TIME: this process's clock stays
            self._measured_at = time.monotonic()
            return
        self._take(reply, sent)

    async def ameasure(self, redis: Any) -> None:
        """Measure with an asyncio client; a refused or odd reply keeps the last offset."""
        sent = time.time() * 1000
        try:
            reply = await redis.time()
        except Exception:  # noqa: BLE001 - as in measure
            self._measured_at = time.monotonic()
            return
        self._take(reply, sent)

    def _take(self, reply: Any, sent_ms: float) -> None:
        if isinstance(reply, (tuple, list)) and len(reply) == 2:
            self.learn((reply[0], reply[1]), sent_ms, time.time() * 1000)
        else:  # a cluster client's answer per node: not one clock to learn from
            self._measured_at = time.monotonic()

    def now_ms(self) -> int:
        """The injected clock's now, else the server's (this process's own clock until the
        first measurement)."""
        now = self.clock.now_ms()
        if now is not None:
            return now
        return int(time.time() * 1000 + (self.offset_ms or 0.0))
