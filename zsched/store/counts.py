"""One queue partition's counts: the one reader of them, for App.status(), AsyncApp.status(),
`zsched status` (zsched/runs/status.py, zsched/aio_reads.py) and the scrape-time collector
(zsched/observability/collector.py).

`queue(pipe, k)` adds the reads to a pipeline (sync or asyncio) after status.lua's reply
(`S.status`), `decode` turns the replies into a `QueueCounts`; each caller derives its units
(ms for QueueStatus, seconds for the gauges) from the same raw readings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from zsched.protocol.keys import GROUP, QueueKeys

#: How many pending entries are read to find the oldest idle one.
PENDING_SAMPLE = 100
#: How many replies `queue` adds to a pipeline.
REPLIES = 8


@dataclass(frozen=True)
class QueueCounts:
    """What one read of one partition saw, as Redis gave it (times are the server's)."""

    #: status.lua's reply: TIME (sec, usec), delayed-set size, due runs, earliest due ms.
    time: tuple[int, int]
    delayed: int
    due: int
    head_ms: int | None
    stream_length: int
    dead: int
    done: int
    stats: Mapping[bytes, bytes]
    paused_ms: int | None
    pause_note: bytes | None
    #: Entries not yet delivered to the group (XINFO GROUPS lag, else XLEN - pending).
    group_lag: int
    pending: int
    #: Largest idle ms among the first PENDING_SAMPLE pending entries.
    oldest_pending_idle_ms: int


def queue(pipe: Any, k: QueueKeys) -> None:
    """Add the reads after status.lua: stream and dead-letter lengths, completions, the
    counters, the pause, the group and its pending entries (REPLIES replies)."""
    pipe.xlen(k.ready)
    pipe.xlen(k.dead)
    pipe.zcard(k.done)
    pipe.hgetall(k.stats)
    pipe.hmget(k.control, "paused_ms", "pause_note")
    pipe.xinfo_groups(k.ready)
    pipe.xpending(k.ready, GROUP)
    pipe.xpending_range(k.ready, GROUP, "-", "+", PENDING_SAMPLE)


def decode(status_reply: list[Any], replies: list[Any]) -> QueueCounts:
    """The counts of status.lua's reply and `queue`'s replies (executed with
    raise_on_error=False). Only "this stream/group does not exist yet" is tolerated (read as
    no group); any other error reply is raised."""
    for i, reply in enumerate(replies):
        if isinstance(reply, Exception) and not (i >= 5 and is_missing(reply)):
            raise reply
    sec, usec, delayed, due, head, _exact = status_reply
    xlen, dead, done, stats, (paused_ms, note), groups, summary, rows = replies
    pending = 0 if isinstance(summary, Exception) else int(summary["pending"])
    idle = 0
    if pending and not isinstance(rows, Exception):
        idle = max((int(x["time_since_delivered"]) for x in rows), default=0)
    return QueueCounts(
        (int(sec), int(usec)), int(delayed), int(due), None if head is None else int(head),
        int(xlen), int(dead), int(done), stats, None if paused_ms is None else int(paused_ms),
        note, _group_lag(groups, int(xlen), pending), pending, idle,
    )  # fmt: skip


def _group_lag(groups: Any, stream_length: int, pending: int) -> int:
    """Entries the consumer group has not read yet (Redis 7's `lag`, else an estimate)."""
    group: Mapping[Any, Any] | None = None
    if not isinstance(groups, Exception):
        group = next((g for g in groups if _text(g.get("name")) == GROUP), None)
    if group is None:
        return stream_length
    if group.get("lag") is not None:
        return int(group["lag"])
    return max(0, stream_length - pending)


def is_missing(exc: BaseException) -> bool:
    """Whether a reply error only says that a stream or its group does not exist yet."""
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    text = str(exc)
    return text.startswith("NOGROUP") or "no such key" in text.lower()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
