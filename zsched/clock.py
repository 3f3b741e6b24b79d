"""Clocks. Scheduling decisions use Redis TIME inside scripts; a Clock is injected for tests.

`SystemClock.now_ms()` returns None, which tells every script wrapper to let the script read
the server's TIME (one clock for all dispatchers, whatever their skew). `FakeClock` returns a
pinned instant that the wrappers pass as `now_ms`, so tests move time without sleeping.
"""

from __future__ import annotations

from typing import Protocol


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
