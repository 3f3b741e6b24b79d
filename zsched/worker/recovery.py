"""Pending-entry recovery: the consumer group, and a worker's holds on stream entries.

A worker renews its hold (the entry's idle time) on every entry it has; an entry whose holder
stopped renewing for the visibility timeout is taken over by `reclaim` (XAUTOCLAIM inside a
script), and one delivered more than `max_deliveries` times goes to the dead letters (a rule's
fire through the writer's dead letter, which ends its rule's overlap lease in the same call).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.exceptions

from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery
from zsched.worker.runner import Runner
from zsched.worker.writer import Writer

log = logging.getLogger(__name__)
_worker_log = logging.getLogger("zsched.worker.worker")
# Bound once: looking a member up on an Enum class costs ~0.3 us, paid per run otherwise.
_FENCED = HoldCode.FENCED


#: The entry shapes of the ready stream this worker reads (docs/protocol.md, "Keys"), its
#: value in `readers`.
READS = "plain,tagged"
#: How the note a 0.4 dispatch.lua leaves in `entries` begins (0.3's: b"zsched 0.3+").
NEW_QUEUE_NOTE = b"zsched 0.4+"


async def ensure_group(r: Any, k: QueueKeys, starting: bool = False) -> bool:
    """Create the consumer group (and the stream) if missing. True if it was created.

    The group starts at id 0 so entries dispatched before any worker existed are read too.
    This is the one place that matches BUSYGROUP.

    `starting`: this worker process reads the queue for the first time. If it creates the
    group then, of a queue no 0.3 dispatcher moved runs of (`entries` missing, or 0.4's note),
    it is the queue's first reader (every 0.3 worker creates the group as it starts), so
    dispatchers may write tagged entries (HSETNX: a choice made already stays). Not when the
    group vanished later (NOGROUP): Redis lost its data, and 0.3 workers may be about to
    create it again. docs/operations.md, "Upgrading from zsched 0.3".
    """
    try:
        await r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    except redis.exceptions.ResponseError as exc:
        if "BUSYGROUP" in str(exc):
            return False
        raise
    if starting:
        try:
            note = await r.get(k.entries)
        except redis.exceptions.ResponseError:  # 0.2's hash: not a new queue
            return True
        if note is None or note.startswith(NEW_QUEUE_NOTE):
            await r.hsetnx(k.control, "entries", "tagged")
    return True


class Holds:
    """This worker's holds: renew them, take over idle ones of others, hand them back."""

    def __init__(self, ctx: WorkerContext, runner: Runner, writer: Writer) -> None:
        self.ctx = ctx
        self.runner = runner
        self.writer = writer
        #: Where the next reclaim pass goes on ("0-0": from the start).
        self.reclaim_cursor = "0-0"
        #: When the last renewal pass that succeeded began (time.monotonic(), which counts a
        #: SIGSTOP too; a pass that failed with Redis down does not count).
        self.renewed_at = time.monotonic()

    def entry_ids(self) -> list[str]:
        """Every entry this worker holds: read ahead, running, or its outcome not written."""
        waiting = [d.entry_id for d in self.runner.waiting]
        return waiting + list(self.runner.running) + self.writer.unwritten_ids()

    async def renew(self) -> int:
        """Reset the idle time of every entry held; returns how many were lost."""
        ctx, lost = self.ctx, 0
        async with self.writer.lock:  # not while acks are in flight: an acked entry is not lost
            began, ids = time.monotonic(), self.entry_ids()
            for i in range(0, len(ids), S.MAX_BATCH):
                chunk = ids[i : i + S.MAX_BATCH]
                codes = await ctx.scripts.run(S.renew(ctx.keys, ctx.consumer, chunk))
                # An entry whose outcome waits for a resend may be refused because the failed
                # call was applied: the resend tells which (writer._judge), not the renewal.
                resent = self.writer.resent
                gone = [e for e, code in zip(chunk, codes, strict=True)
                        if code == _FENCED and e not in resent]  # fmt: skip
                if gone:
                    lost += len(gone)
                    self.writer.mark_lost(gone)
            self.renewed_at = began
        if lost:
            ctx.metrics.fenced.labels(ctx.queue, "renew").inc(lost)
        # A rule's overlap lease is not renewed here: it has no TTL and lasts while its run
        # lives, also while a dead worker's entry waits to be reclaimed (docs/policies.md).
        return lost

    async def reclaimable(self) -> bool:
        """Whether any pending entry is idle past the visibility timeout: one XPENDING IDLE,
        so an idle queue costs Redis one command per reclaim period, not a reclaim script
        (EVALSHA plus its checks and XAUTOCLAIM). A paged reclaim goes on while it has a cursor."""
        if self.reclaim_cursor not in ("0-0", "0"):
            return True
        idle_ms, ready = self.ctx.settings.visibility_timeout_ms, self.ctx.keys.ready
        rows = await self.ctx.redis.xpending_range(ready, GROUP, "-", "+", 1, idle=idle_ms)
        return bool(rows)

    async def reclaim(self, limit: int) -> list[Delivery]:
        """Take over up to `limit` entries idle past the visibility timeout."""
        if limit <= 0:
            return []
        ctx = self.ctx
        held = set(self.entry_ids())
        if held:
            # Renew first: entries this worker holds can look idle after it was paused (SIGSTOP,
            # a long GC, a Redis restart), and XAUTOCLAIM would hand them back to their own
            # holder, counting a reclaim and a delivery that never ran.
            await self.renew()
        s = ctx.settings
        result = await ctx.scripts.run(
            S.reclaim(
                ctx.keys,
                ctx.consumer,
                now_ms=ctx.clock.now_ms(),
                min_idle_ms=s.visibility_timeout_ms,
                count=min(limit, S.MAX_BATCH),
                max_deliveries=s.max_deliveries,
                cursor=self.reclaim_cursor,
            )
        )
        self.reclaim_cursor = result.cursor
        self._count(result)
        over = [c for c in result.over if c.entry_id not in held]
        for c in over:  # a rule's fire past max_deliveries: dead-lettered with its lease
            reason = (f"delivered {c.deliveries} times without an ack "
                      f"(max_deliveries {s.max_deliveries})")  # fmt: skip
            d = Delivery(c.entry_id, c.run_id, c.envelope, None, c.deliveries)
            self.writer.dead(d, reason, "max_deliveries")
        if over:
            self.writer.wake.set()  # the flush loop writes them now
        # Still held here (renewal raced a zero visibility timeout): one execution per entry.
        return [Delivery(c.entry_id, c.run_id, c.envelope, None, c.deliveries)
                for c in result.claimed if c.entry_id not in held]  # fmt: skip

    def _count(self, result: S.ReclaimResult) -> None:
        q, m = self.ctx.queue, self.ctx.metrics
        if result.dead:
            m.dead_lettered.labels(q, "max_deliveries").inc(result.dead)
            log.warning("%d runs delivered too many times went to the dead letters",
                        result.dead, extra={"queue": q})  # fmt: skip
        if result.claimed:
            m.reclaimed.labels(q).inc(len(result.claimed))
            log.info("reclaimed %d runs from stalled consumers", len(result.claimed),
                     extra={"queue": q})  # fmt: skip

    async def own_pending(self) -> list[tuple[str, str]]:
        """(entry_id, run_id) of every entry still pending for this consumer (for hand-back)."""
        r, k = self.ctx.redis, self.ctx.keys
        out: list[tuple[str, str]] = []
        start = "-"
        while True:
            rows = await r.xpending_range(k.ready, GROUP, start, "+", 1000, self.ctx.consumer)
            if not rows:
                return out
            for row in rows:
                eid = row["message_id"]
                eid = eid.decode() if isinstance(eid, bytes) else eid
                entry = await r.xrange(k.ready, eid, eid)
                run_id = entry[0][1].get(b"run_id", b"").decode() if entry else ""
                out.append((eid, run_id))
            if len(rows) < 1000:
                return out
            start = "(" + out[-1][0]

    def _count_release(self, released: int, fenced: int, gone: int) -> None:
        """Count the hand-back's codes: FENCED (another consumer took the entry over) in
        zsched_fenced_total{reason="release"}; GONE (no longer pending, or its run no longer
        live: nothing to hand back) at debug only, as it is harmless."""
        ctx = self.ctx
        if fenced:
            ctx.metrics.fenced.labels(ctx.queue, "release").inc(fenced)
        if released:
            _worker_log.info("handed back %d runs", released, extra={"queue": ctx.queue})
        if fenced or gone:
            _worker_log.debug("hand-back refused: %d fenced (another consumer holds them), %d "
                              "gone (no longer pending or no longer live)", fenced, gone,
                              extra={"queue": ctx.queue})  # fmt: skip

    async def _release(self, pairs: list[tuple[str, str]]) -> list[int]:
        """release.lua over (entry_id, run_id) pairs in batches; a HoldCode each."""
        ctx, codes = self.ctx, list[int]()
        for i in range(0, len(pairs), S.MAX_BATCH):
            batch = pairs[i : i + S.MAX_BATCH]
            got = await ctx.scripts.run(S.release(ctx.keys, ctx.consumer, batch,
                                                  now_ms=ctx.clock.now_ms()))  # fmt: skip
            codes.extend(got)
        return codes

    async def hand_back(self, keep: frozenset[str] = frozenset()) -> None:
        """Release every entry still pending for this consumer (unfinished or never started),
        but those of `keep` (entry ids), which stay held."""
        ctx = self.ctx
        k, r = ctx.keys, ctx.redis
        mine = [(eid, run_id) for eid, run_id in await self.own_pending() if eid not in keep]
        gone = [eid for eid, run_id in mine if not run_id]
        pairs = [(eid, run_id) for eid, run_id in mine if run_id]
        if gone:
            await r.xack(k.ready, GROUP, *gone)
        codes = await self._release(pairs)
        self._count_release(codes.count(HoldCode.OK), codes.count(HoldCode.FENCED),
                            codes.count(HoldCode.GONE))  # fmt: skip
        if not await self.own_pending():
            await r.xgroup_delconsumer(k.ready, GROUP, ctx.consumer)
            await r.hdel(k.readers, ctx.consumer)

    async def release_waiting(self, ds: list[Delivery]) -> list[int]:
        """Hand back runs read ahead and never started, because every slot is stuck (release:
        due now, same attempt, not charged), and drop them from `waiting`; a HoldCode each.
        Under the writer's lock, so that no renewal runs between the two (it would find them
        gone and count them lost). From then on they are not held here: an outcome of this
        worker for one of those entries would be fenced."""
        ctx = self.ctx
        async with self.writer.lock:
            codes = await self._release([(d.entry_id, d.run_id) for d in ds])
            # Fenced ones are another consumer's, gone ones have no run: none to start.
            for d in ds:
                self.runner.waiting.remove(d)
        released = [d.run_id for d, c in zip(ds, codes, strict=True) if c == HoldCode.OK]
        if codes.count(HoldCode.FENCED):
            ctx.metrics.fenced.labels(ctx.queue, "release").inc(codes.count(HoldCode.FENCED))
        ctx.metrics.stuck_handbacks.labels(ctx.queue).inc(len(released))
        stuck = self.runner.stuck
        _worker_log.warning("every slot (%d) is held by a sync handler stuck past its timeout "
                            "(runs %s): handed back %d runs read ahead for other workers (%s); "
                            "%d fenced or gone; reading none until a thread returns",
                            len(stuck), ", ".join(stuck[:5]), len(released),
                            ", ".join(released[:5]), len(ds) - len(released),
                            extra={"queue": ctx.queue, "run_ids": released[:5]})  # fmt: skip
        return codes
