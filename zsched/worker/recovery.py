"""Pending-entry recovery: the consumer group, lease renewal, and reclaiming dead consumers' runs.

A worker renews the lease (idle time) of every entry it holds; an entry whose owner stopped
renewing for the visibility timeout is taken over by `reclaim` (XAUTOCLAIM inside a script),
and one delivered more than `max_deliveries` times goes to the dead letters.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis.exceptions

from zsched.protocol.keys import GROUP, QueueKeys
from zsched.store import scripts as S

if TYPE_CHECKING:
    from zsched.worker.worker import Delivery, Worker

log = logging.getLogger(__name__)


async def ensure_group(r: Any, k: QueueKeys) -> bool:
    """Create the consumer group (and the stream) if missing. True if it was created.

    The group starts at id 0 so entries dispatched before any worker existed are read too.
    This is the one place that matches BUSYGROUP.
    """
    try:
        await r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
        return True
    except redis.exceptions.ResponseError as exc:
        if "BUSYGROUP" in str(exc):
            return False
        raise


async def renew_leases(w: Worker) -> int:
    """Reset the idle time of every entry `w` holds; returns how many it had lost."""
    lost = 0
    async with w.writing:  # not while acks are in flight: an acked entry is not a lost one
        ids = list(w.held_entry_ids())
        for i in range(0, len(ids), S.MAX_BATCH):
            chunk = ids[i : i + S.MAX_BATCH]
            codes = await w.scripts.run(S.renew(w.app.keys, w.consumer, chunk))
            for entry_id, code in zip(chunk, codes, strict=True):
                if code == S.FENCED:
                    lost += 1
                    w.mark_lost(entry_id)
    if lost:
        w.metrics.fenced.labels(w.app.queue, "renew").inc(lost)
    # A rule's overlap lease is not renewed here: it has no TTL and lasts while its run
    # lives, also while a dead worker's entry waits to be reclaimed (docs/policies.md).
    return lost


async def reclaim_once(w: Worker, limit: int) -> list[Delivery]:
    """Take over up to `limit` entries idle past the visibility timeout."""
    from zsched.worker.worker import Delivery

    if limit <= 0:
        return []
    held = set(w.held_entry_ids())
    if held:
        # Renew first: entries this worker holds can look idle after it was paused (SIGSTOP,
        # a long GC, a Redis restart), and XAUTOCLAIM would hand them back to their own
        # holder, counting a reclaim and a delivery that never ran.
        await renew_leases(w)
    s = w.settings
    result = await w.scripts.run(
        S.reclaim(
            w.app.keys,
            w.consumer,
            now_ms=w.app.clock.now_ms(),
            min_idle_ms=s.visibility_timeout_ms,
            count=min(limit, S.MAX_BATCH),
            max_deliveries=s.max_deliveries,
            cursor=w.reclaim_cursor,
        )
    )
    w.reclaim_cursor = result.cursor
    q = w.app.queue
    if result.dead:
        w.metrics.dead_lettered.labels(q, "max_deliveries").inc(result.dead)
        log.warning("%d runs delivered too many times went to the dead letters", result.dead,
                    extra={"queue": q})  # fmt: skip
    if result.claimed:
        w.metrics.reclaimed.labels(q).inc(len(result.claimed))
        log.info("reclaimed %d runs from stalled consumers", len(result.claimed),
                 extra={"queue": q})  # fmt: skip
    # Still held here (renewal raced a zero visibility timeout): one execution per entry.
    return [Delivery(c.entry_id, c.run_id, c.envelope, None, c.deliveries)
            for c in result.claimed if c.entry_id not in held]  # fmt: skip


async def own_pending(w: Worker) -> list[tuple[str, str]]:
    """(entry_id, run_id) of every entry still pending for this consumer (for hand-back)."""
    k = w.app.keys
    out: list[tuple[str, str]] = []
    start = "-"
    while True:
        rows = await w.redis.xpending_range(k.ready, GROUP, start, "+", 1000, w.consumer)
        if not rows:
            return out
        for row in rows:
            eid = row["message_id"]
            eid = eid.decode() if isinstance(eid, bytes) else eid
            entry = await w.redis.xrange(k.ready, eid, eid)
            run_id = entry[0][1].get(b"run_id", b"").decode() if entry else ""
            out.append((eid, run_id))
        if len(rows) < 1000:
            return out
        start = "(" + out[-1][0]
