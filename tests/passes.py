"""The passes of a running dispatcher as events, for tests that must not sleep or time.

`Passes(d)` wraps one Dispatcher's `tick` (on the instance, test-side only): each pass of its
`run()` loop puts (wake-ups heard before the pass, its TickResult) on a queue. A test awaits
the next pass instead of sleeping, and tells a pass caused by a wake-up from one caused by
the loop's timer by `Dispatcher.wakeups`. A hung wait ends at pytest-timeout.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

#: Far beyond any test: a dispatcher whose timers are this long passes only when woken.
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Pass:
    #: `Dispatcher.wakeups` when the pass began (wake messages heard so far).
    wakeups: int
    moved: int
    next_due_ms: int | None


class Passes:
    """Every pass of dispatcher `d` from now on, in order."""

    def __init__(self, d: Any) -> None:
        self._q: asyncio.Queue[Pass] = asyncio.Queue()
        self.seen = 0
        tick = d.tick

        async def observed() -> Any:
            woken = d.wakeups
            t = await tick()
            self._q.put_nowait(Pass(woken, t.moved, t.next_due_ms))
            return t

        d.tick = observed

    async def next(self) -> Pass:
        p = await self._q.get()
        self.seen += 1
        return p

    async def until(self, cond: Any) -> Pass:
        """The first pass after which `cond()` holds (checked after each pass)."""
        while True:
            p = await self.next()
            if cond():
                return p

    def pending(self) -> int:
        """Passes that happened and were not awaited yet."""
        return self._q.qsize()
