"""Partitioned queues: where a run lives and the stored partition count (the views of one
partition are QueueContext.view; dispatch/multi.py and worker/multi.py serve every partition,
runs/partitioned.py reads across them).

A queue `q` split into N > 1 partitions is N complete queues whose keys carry the tags
`{q#0}` … `{q#N-1}`, so Redis Cluster spreads them over its masters. A run lives in the
partition of its run id (`run_partition`), a recurring rule in the partition of its schedule id
(`partition_for`); a fire's run id `<schedule_id>@<slot>` routes by the part before its last `@`,
so a rule's fires land in the rule's partition and dedupe stays exact. The count is recorded
once in Redis (keys.partitions_key) and an App with another count is refused (ConfigError):
changing N moves every run id to another partition, so it needs a drain (docs/scaling.md).
"""

from __future__ import annotations

import zlib
from typing import Any

from zsched.errors import ConfigError
from zsched.protocol.keys import QueueKeys, partitions_key
from zsched.protocol.runids import rule_of
from zsched.store.state import StoreTarget

#: Largest accepted partition count; far more than masters a cluster sensibly has.
MAX_PARTITIONS = 1024


def partition_for(key: str, n: int) -> int:
    """The partition of `key` among `n`: CRC-32 (zlib, IEEE) of its UTF-8 bytes, modulo n."""
    return zlib.crc32(key.encode()) % n if n > 1 else 0


def routing_key(run_id: str) -> str:
    """The part of a run id that picks its partition: the text before its last `@`, if any.

    A fire `<schedule_id>@<slot>` then routes with its rule; other ids are hashed whole unless
    they contain `@` (still a pure function of the id, so dedupe stays exact).
    """
    return rule_of(run_id) or run_id


def run_partition(run_id: str, n: int) -> int:
    """The partition that holds run `run_id` of a queue with `n` partitions."""
    return partition_for(routing_key(run_id), n)


def check_count(n: object) -> int:
    """Validate a partition count (1 = not partitioned)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise ConfigError(f"partitions must be an integer 1..{MAX_PARTITIONS}, got {n!r}")
    return n


def stored_count(r: Any, queue: str) -> int:
    """The partition count recorded in Redis for `queue` (1 when none is recorded)."""
    raw = r.get(partitions_key(queue))
    return int(raw) if raw is not None else 1


def claim_layout(target: StoreTarget) -> None:
    """Record the App's partition count, or refuse one that differs from the recorded count.

    Runs once per App (views share the flag). A partitioned App also refuses a queue whose
    unpartitioned keys still hold live runs: nobody would serve them any more.
    """
    if target.shared.layout_checked:
        return
    r, key, n = target.redis, partitions_key(target.queue), target.partitions
    if n == 1:
        stored = stored_count(r, target.queue)
        if stored != 1:
            raise ConfigError(_mismatch(target.queue, stored, 1))
    else:
        old = r.set(key, n, nx=True, get=True)
        if old is None and int(r.hlen(QueueKeys(target.queue).runs)):
            r.delete(key)
            raise ConfigError(
                f"queue {target.queue!r} holds live runs in its unpartitioned keys; drain it "
                f"before splitting it into {n} partitions (docs/scaling.md)"
            )
        if old is not None and int(old) != n:
            raise ConfigError(_mismatch(target.queue, int(old), n))
    target.shared.layout_checked = True


def _mismatch(queue: str, stored: int, wanted: int) -> str:
    return (
        f"queue {queue!r} is recorded in Redis with {stored} partition(s), this App uses "
        f"{wanted}; use partitions={stored}, or drain the queue and reset the count as "
        f"docs/scaling.md describes"
    )


def reset_layout(target: StoreTarget) -> None:
    """Forget the recorded count of a drained queue, so it can be re-split (docs/scaling.md).

    Refuses while any partition (or the unpartitioned keys) still holds a live run or an
    undelivered stream entry; dead letters and completion records are not moved.
    """
    r = target.redis
    stored = stored_count(r, target.queue)
    every = [QueueKeys(target.queue)] + [QueueKeys(target.queue, i) for i in range(stored)]
    busy = [k.tag for k in every if int(r.hlen(k.runs)) or int(r.xlen(k.ready))]
    if busy:
        raise ConfigError(f"queue {target.queue!r} is not drained: live runs in {', '.join(busy)}")
    r.delete(partitions_key(target.queue))
    target.shared.layout_checked = False


def declared_in(declared: dict[str, dict[str, Any]], n: int, i: int) -> dict[str, dict[str, Any]]:
    """The declared rules that live in partition `i` of `n` (each rule in exactly one)."""
    return {s: o for s, o in declared.items() if partition_for(s, n) == i}


def shares(total: int, n: int) -> list[int]:
    """Split `total` handler slots over `n` partitions as evenly as possible, at least 1 each."""
    return [max(1, total // n + (1 if i < total % n else 0)) for i in range(n)]
