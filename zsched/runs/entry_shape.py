"""The shape of the entries dispatch.lua writes on the ready stream, and the switch between them.

An entry has two shapes (docs/protocol.md, "Keys"): `plain` (`run_id`, `envelope`, `due_ms`)
and `tagged` (`run_id`, `envelope` holding the run's value of `runs`: due tag, envelope).
Tagged costs Redis ~5.6 k fewer instructions a run (BENCHMARKS.md, "Session 24"), but a
worker of zsched 0.3 reads only plain: it dead-letters a tagged entry as undecodable (bytes
kept; a replay untags them). `control`'s `entries` field holds the shape; dispatch.lua reads it
with the pause flag. A queue writes tagged:

- when a 0.4 worker, as it starts, creates the consumer group of a queue no 0.3 dispatcher
  moved runs of (every 0.3 worker creates the group as it starts, so none is reading:
  zsched/worker/recovery.py, ensure_group);
- otherwise (a queue of zsched 0.3, or one whose data Redis lost: missing keys cannot tell it
  from a new one) after `zsched entries tagged`, which lists the group's
  consumers first and refuses while one that did not register as a reader of both shapes
  (`readers`) read the stream lately. Redis before 7.2 lists a consumer only once an entry was
  delivered to it, so a 0.3 worker that never got one is not seen: upgrade every worker first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis.exceptions

from zsched.errors import InvalidArgument
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.text import lossy_text
from zsched.store.counts import is_missing

SHAPES = ("plain", "tagged")
#: A consumer not registered as a reader of both shapes blocks the switch to tagged while it
#: read the stream within this long: a live worker reads at least every few seconds (its
#: blocking read's timeout), so one idle for 10 minutes has stopped.
DEFAULT_IDLE_OVER_MS = 600_000


@dataclass(frozen=True)
class Consumer:
    """A consumer of the ready stream's group, as XINFO CONSUMERS tells it."""

    name: str
    idle_ms: int
    pending: int
    #: Its value in `readers` ("plain,tagged"), None when it did not register (zsched 0.3).
    reads: str | None


@dataclass(frozen=True)
class PartitionShape:
    """One queue partition's entry shape and the consumers of its stream."""

    partition: int | None
    shape: str
    consumers: list[Consumer] = field(default_factory=list)

    def blocking(self, idle_over_ms: int) -> list[Consumer]:
        """The consumers that may read only plain entries: not registered as readers of
        tagged ones, and seen within `idle_over_ms`."""
        return [c for c in self.consumers
                if not (c.reads and "tagged" in c.reads.split(",")) and c.idle_ms < idle_over_ms]  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "shape": self.shape,
                "consumers": [vars(c) for c in self.consumers]}  # fmt: skip


def read(r: Any, k: QueueKeys) -> PartitionShape:
    """The shape the partition's dispatchers write, and its consumers."""
    shape = "tagged" if r.hget(k.control, "entries") == b"tagged" else "plain"
    try:
        rows = r.xinfo_consumers(k.ready, GROUP)
    except redis.exceptions.ResponseError as exc:
        if not is_missing(exc):  # no stream or no group yet: no consumers
            raise
        rows = []
    names = [lossy_text(row["name"]) for row in rows]
    reads = r.hmget(k.readers, names) if names else []
    consumers = [
        Consumer(n, int(row.get("idle", 0)), int(row.get("pending", 0)),
                 lossy_text(v) if v is not None else None)
        for n, row, v in zip(names, rows, reads, strict=True)
    ]  # fmt: skip
    return PartitionShape(k.partition, shape, consumers)


def check_shape(shape: str) -> str:
    if shape not in SHAPES:
        raise InvalidArgument(f"entry shape must be one of {', '.join(SHAPES)}, got {shape!r}",
                              "shape")  # fmt: skip
    return shape


def write(r: Any, k: QueueKeys, shape: str) -> None:
    """Set the partition's shape; dispatch.lua writes it from its next call on."""
    r.hset(k.control, "entries", check_shape(shape))
