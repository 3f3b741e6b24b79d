"""Dispatcher heartbeats in Redis, so a console can show which dispatchers run and when
each was last seen (workers show up in the consumer group already; dispatchers leave no
other trace).

One ZSET per queue partition (`QueueKeys.dispatchers`): member the dispatcher's name, score
its last beat in ms. A busy dispatcher beats at most every BEAT_EVERY_S (one ZADD), an idle
one (asleep between passes) every IDLE_BEAT_EVERY_S; it trims members older than KEEP_MS at
its first beat and then every TRIM_EVERY beats (one ZREMRANGEBYSCORE, so dead dispatchers'
entries do not pile up), and removes itself when it stops. Idle, that is about 2 commands a
minute, inside the budget of 1 command a second for an idle queue (BENCHMARKS.md). A
console therefore sees an idle dispatcher's beat up to ~30 s old; it calls one stale at 60 s.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from zsched.protocol.keys import QueueKeys

log = logging.getLogger(__name__)

#: Least time between two beats of one dispatcher.
BEAT_EVERY_S = 5.0
#: Least time between two beats of an idle one: a beat every 5 s was 0.2 of the ~1 command a
#: second an idle queue may cost. Half the console's 60 s staleness, so one late beat is not
#: taken for a dead dispatcher.
IDLE_BEAT_EVERY_S = 30.0
#: Beats older than this are trimmed by any beating dispatcher.
KEEP_MS = 3_600_000
#: Beats between two trims of old beats (12 x 5 s: about a minute busy, 6 minutes idle).
TRIM_EVERY = 12
#: Most dispatchers a reader lists (the newest beats).
LIST_MAX = 20


def process_name() -> str:
    """host:pid:random, like a worker's consumer name."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class Heartbeat:
    """The beat of one dispatcher on one queue partition."""

    keys: QueueKeys
    name: str
    every_s: float = BEAT_EVERY_S
    idle_every_s: float = IDLE_BEAT_EVERY_S
    _last: float | None = None
    _beats: int = 0

    async def beat(self, redis: Any, now_ms: int, force: bool = False, idle: bool = False) -> bool:
        """Write the beat if one is due (True when written): `every_s` after the last one, or
        `idle_every_s` when `idle` (the dispatcher sleeps between passes). `now_ms`: the Redis
        server's now (the dispatcher's ServerTime; a fake clock's in tests), never this host's
        clock: a host whose clock is off would show a wrong age and trim other dispatchers'
        beats."""
        mono = time.monotonic()
        every = self.idle_every_s if idle else self.every_s
        if not force and self._last is not None and mono < self._last + every:
            return False
        self._last = mono
        ms = int(now_ms)
        await redis.zadd(self.keys.dispatchers, {self.name: ms})
        if self._beats % TRIM_EVERY == 0:  # the first beat, then about once a minute
            await redis.zremrangebyscore(self.keys.dispatchers, "-inf", ms - KEEP_MS)
        self._beats += 1
        return True

    async def leave(self, redis: Any) -> None:
        """A stopping dispatcher's last word: it is gone, not stale."""
        await redis.zrem(self.keys.dispatchers, self.name)


def dispatchers(r: Any, k: QueueKeys, limit: int = LIST_MAX) -> list[tuple[str, int]]:
    """(name, last beat ms) of the most recently seen dispatchers, newest first (one read)."""
    rows = r.zrevrange(k.dispatchers, 0, limit - 1, withscores=True)
    return [(n.decode() if isinstance(n, bytes) else str(n), int(s)) for n, s in rows]
