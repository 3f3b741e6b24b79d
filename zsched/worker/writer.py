"""`Writer`: the worker's buffered outcomes, and the one place that writes them.

Handlers end faster than Redis round trips: outcomes wait here and go out in batches (one ack
script call for up to ACK_BATCH runs). Every write is fenced: a consumer that no longer owns
an entry cannot ack, retry or dead-letter it. An outcome sent again after its call failed
(the reply lost: maybe applied) and found no longer pending is most likely written by that
call: counted apart (zsched_resent_written_total), not as a fence. A rule's run frees its
overlap lease in the same script call that writes its outcome (ack, dead or discard: a crash
between two calls can no longer leave the lease held and a queued fire waiting), or keeps it
for a retry's wait (extend.lua)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NamedTuple

from zsched.observability import tracing as _tracing
from zsched.protocol.replies import HoldCode
from zsched.protocol.runids import rule_of
from zsched.runs import controls as C
from zsched.runs import outcomes as _outcomes
from zsched.store import scripts as S
from zsched.store.connection import RETRYABLE_ERRORS
from zsched.store.retrying import REFUSALS
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery

log = logging.getLogger("zsched.worker.worker")  # one logger for the whole worker
#: Retries, dead letters and discards written per script call (they carry envelopes, and a
#: retry re-adds its run to the delayed set: each costs more than an ack). An ack of 100 runs
#: held Redis ~0.6 ms when this was set (also while a 300,000-entry stream drained); 1000 (the
#: scripts' bound) took ~6 ms, over the 5 ms a script may hold Redis (BENCHMARKS.md).
FLUSH_BATCH = 100
#: Acks written per script call: about the Redis time of one of the dispatcher's calls (its
#: 1 ms target). Against 100, a flush of 1,000 outcomes is 5 calls instead of 10: ack.lua's
#: per-call work (TIME, type checks, the trim's reads, PEXPIRE) and a round trip paid half
#: as often (callgrind: 30.8 k -> 29.8 k Redis instructions a run). 250 ran faster still at
#: concurrency 1,000, but in the unpinned 1M drain 2 of 5 runs had an ack over 5 ms (a
#: ~1.3 ms call plus the host's preemption), against 0 of 5 at 200 and at 100
#: (BENCHMARKS.md, session 20).
ACK_BATCH = 200
_FLUSH_ERRORS: tuple[type[Exception], ...] = (*RETRYABLE_ERRORS, *REFUSALS)
#: A flush keeps what it had not written on these: a Redis error, or a cancel (the shutdown's).
_KEEP_ON: tuple[type[BaseException], ...] = (*_FLUSH_ERRORS, asyncio.CancelledError)
# Bound once: looking a member up on an Enum class costs ~0.3 us, paid per run otherwise.
_OK, _FENCED, _GONE = HoldCode.OK, HoldCode.FENCED, HoldCode.GONE
#: Run ids named in the one WARNING (or INFO) line per refused batch.
_NAMED = 5


class OverlapLease(NamedTuple):
    """The overlap lease a rule's run holds while this worker has it (envelope `lease_ms`)."""

    schedule_id: str
    run_id: str
    lease_ms: int


class Writer:
    """Buffers outcomes (ack, retry, dead, discard) and writes them; tracks what is unwritten."""

    def __init__(self, ctx: WorkerContext, slot_free: asyncio.Event) -> None:
        self.ctx = ctx
        #: Set when a write freed handler slots (the read loop waits on it).
        self.slot_free = slot_free
        #: Set when an outcome is buffered (the flush loop waits on it).
        self.wake = asyncio.Event()
        self.acks: list[tuple[str, str]] = []
        self.retries: list[tuple[str, str, int, bytes]] = []
        self.deads: list[tuple[str, str, str, bytes]] = []
        self.discards: list[tuple[str, str]] = []
        #: entry_id -> (run_id, encoded outcome) of keep_result runs, recorded once written.
        self.kept: dict[str, tuple[str, bytes]] = {}
        #: Acks in a script call now (still this worker's holds until the call returns).
        self.flushing: set[str] = set()
        #: Entries another consumer took over (found by a fenced write or hold renewal).
        self.lost: set[str] = set()
        #: Entries whose outcome went out in a call that failed (the reply may be all that was
        #: lost): on the resend, "no longer pending" is not a fence (docs/protocol.md).
        self.resent: set[str] = set()
        #: entry_id -> the overlap lease of a rule's run this worker has.
        self.overlap_leases: dict[str, OverlapLease] = {}
        # Held by flush and by hold renewal: a renewal racing an ack would read the acked
        # entry as lost (and count a fence that never happened).
        self.lock = asyncio.Lock()

    # -- what is not written yet ---------------------------------------------------------------

    def unwritten(self) -> bool:
        return bool(self.acks or self.retries or self.deads or self.discards)

    def unwritten_ids(self) -> list[str]:
        """Entries whose outcome is buffered or being written: still this worker's holds."""
        ids = [a[0] for a in self.acks] + [r[0] for r in self.retries]
        ids += [d[0] for d in self.discards]
        return ids + [d[0] for d in self.deads] + list(self.flushing)

    def has_outcome(self, entry_id: str) -> bool:
        outcomes = (*self.acks, *self.retries, *self.deads, *self.discards)
        return any(entry_id == o[0] for o in outcomes)

    def mark_lost(self, entry_ids: list[str]) -> None:
        """Entries a hold renewal found taken over: one WARNING for them all, not one each."""
        new = [e for e in entry_ids if e not in self.lost]
        if new:
            self.lost.update(new)
            log.warning("lost %d entry(ies): another consumer owns them now (entries %s%s)",
                        len(new), ", ".join(new[:_NAMED]), " ..." if len(new) > _NAMED else "",
                        extra={"queue": self.ctx.queue})  # fmt: skip

    # -- buffering -------------------------------------------------------------------------------

    def dead(self, d: Delivery, reason: str, kind: str, task: str = "") -> None:
        """Buffer a dead letter (dead.lua at the flush), counted and logged now."""
        ctx = self.ctx
        if d.run_id and d.entry_id not in self.overlap_leases:
            # No lease known (its envelope undecoded: undecodable, or an entry reclaim handed
            # over): a rule fire's run id names its rule. A guess is harmless: dead.lua frees a
            # lease only for the run it names.
            sid = rule_of(d.run_id)
            if sid is not None:
                self.overlap_leases[d.entry_id] = OverlapLease(sid, d.run_id, 0)
        self.deads.append((d.entry_id, d.run_id, reason, d.raw))
        _tracing.event("zsched.dead_letter", failed=True, reason=reason, kind=kind)
        ctx.metrics.dead_lettered.labels(ctx.queue, kind).inc()
        ctx.metrics.completed.labels(ctx.queue, task or "-", "dead").inc()
        log.warning("run %s dead-lettered: %s", d.run_id or d.entry_id, reason,
                    extra={"queue": ctx.queue, "run_id": d.run_id})  # fmt: skip

    def discard(self, d: Delivery, task: str) -> None:
        """The run was asked to stop and did: it ends cancelled (discard.lua at the flush)."""
        ctx = self.ctx
        self.discards.append((d.entry_id, d.run_id))
        ctx.metrics.completed.labels(ctx.queue, task, "cancelled").inc()
        log.info("run %s cancelled", d.run_id, extra={"queue": ctx.queue, "run_id": d.run_id})

    # -- writing ---------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write buffered outcomes (not while holds are renewed: see Holds.renew)."""
        async with self.lock:
            await self._flush()

    async def _flush(self) -> None:
        """Write buffered outcomes: one script call per kind per ACK_BATCH acks or
        FLUSH_BATCH other outcomes."""
        if self.discards:
            await self._flush_discards()
        while self.acks or self.retries or self.deads:
            # Now for each batch, not once per flush: outcomes buffered while an earlier batch
            # was written (an injected clock may have moved meanwhile) get their retry due
            # from the instant they are written (found by the model: make model, issue 18).
            now = self.ctx.clock.now_ms()
            b = FLUSH_BATCH
            acks, self.acks = self.acks[:ACK_BATCH], self.acks[ACK_BATCH:]
            retries, self.retries = self.retries[:b], self.retries[b:]
            deads, self.deads = self.deads[:b], self.deads[b:]
            acked = [a[0] for a in acks]
            self.flushing.update(acked)
            try:
                # Each kind's list is emptied once its call has returned (_taken), so a failure
                # later in the pass puts back only what was not written.
                if acks:
                    await self._write_acks(acks, now)
                if retries:
                    await self._write_retries(retries, now)
                if deads:
                    await self._write_deads(deads, now)
            except _KEEP_ON:
                # Keep the outcomes; the holds keep the entries ours until Redis is back. A
                # cancel (the shutdown stops the flush loop mid-call) keeps them too: dropped,
                # the shutdown's hand-back would release runs that are done, to run again.
                self.acks[:0], self.retries[:0], self.deads[:0] = acks, retries, deads
                raise
            finally:
                self.flushing.difference_update(acked)
                self.slot_free.set()

    def _leases_of(self, items: list[Any]) -> list[tuple[str, str]]:
        """(schedule_id, run_id) of the overlap leases the runs of `items` hold."""
        held = [self.overlap_leases.get(it[0]) for it in items]
        return [(lease.schedule_id, lease.run_id) for lease in held if lease is not None]

    def _leases_written(self, items: list[Any]) -> None:
        """The call that ended the leases of `items` returned (until then they are kept: a
        failed call is sent again, leases and all)."""
        for it in items:
            self.overlap_leases.pop(it[0], None)

    async def _write_acks(self, acks: list[tuple[str, str]], now: int | None) -> None:
        """The ack also ends the runs' overlap leases (one script: a crash after the ack can
        no longer leave a finished run's lease held and a queued fire waiting)."""
        ctx, window = self.ctx, self.ctx.queue_settings.dedupe_window_ms
        leases = self._leases_of(acks)
        codes = await self._send(S.ack(ctx.keys, ctx.consumer, acks, now_ms=now,
                                       dedupe_window_ms=window, leases=leases), acks)  # fmt: skip
        if leases:
            self._leases_written(acks)
        written = _taken(acks)
        await self._record(written, self._judge("ack", written, codes))

    async def _write_retries(
        self, retries: list[tuple[str, str, int, bytes]], now: int | None
    ) -> None:
        ctx = self.ctx
        codes = await self._send(S.retry(ctx.keys, ctx.consumer, retries, now_ms=now), retries)
        written = _taken(retries)
        await self._extend(written, self._judge("retry", written, codes))
        for r in written:  # the kept outcome belongs to the run's last attempt
            self.kept.pop(r[0], None)

    async def _write_deads(self, deads: list[tuple[str, str, str, bytes]], now: int | None) -> None:
        """The dead letter also ends the runs' overlap leases, in the same call (as the ack)."""
        ctx, window = self.ctx, self.ctx.queue_settings.dedupe_window_ms
        leases = self._leases_of(deads)
        codes = await self._send(S.dead(ctx.keys, ctx.consumer, deads, now_ms=now,
                                        dedupe_window_ms=window, leases=leases), deads)  # fmt: skip
        if leases:
            self._leases_written(deads)
        written = _taken(deads)
        await self._record(written, self._judge("dead", written, codes))

    async def _flush_discards(self) -> None:
        """End the runs that stopped after a cancel request (discard.lua), and their leases
        in the same call."""
        ctx = self.ctx
        while self.discards:
            batch, self.discards = self.discards[:FLUSH_BATCH], self.discards[FLUSH_BATCH:]
            leases = self._leases_of(batch)
            try:
                codes = await self._send(C.discard(ctx.keys, ctx.consumer, batch,
                    now_ms=ctx.clock.now_ms(),
                    dedupe_window_ms=ctx.queue_settings.dedupe_window_ms, leases=leases),
                    batch)  # fmt: skip
            except _KEEP_ON:
                self.discards[:0] = batch
                raise
            if leases:
                self._leases_written(batch)
            await self._record(batch, self._judge("discard", batch, codes))

    async def _record(self, items: list[Any], codes: list[int]) -> None:
        """Keep the outcomes of keep_result runs just finished (record.lua); none: no call.
        Written after the run's own outcome: a crash in between loses only the details."""
        if not self.kept:
            return
        pairs = []
        for it, code in zip(items, codes, strict=True):
            kept = self.kept.pop(it[0], None)
            if kept is not None and code == _OK:
                pairs.append(kept)
        if pairs:
            ctx = self.ctx
            call = _outcomes.record(ctx.keys, pairs, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.queue_settings.dedupe_window_ms)  # fmt: skip
            await ctx.scripts.run(call)

    async def _extend(self, items: list[Any], codes: list[int]) -> None:
        """A rule's run waits for its retry: not finished, so it keeps its overlap lease, for
        the wait and a lease beyond it (no worker renews it meanwhile)."""
        for it, code in zip(items, codes, strict=True):
            lease = self.overlap_leases.pop(it[0], None)
            if lease is None or code != _OK:
                continue
            sid, run_id, lease_ms = lease
            await self.ctx.scripts.run(S.extend(self.ctx.keys, sid, run_id, it[2] + lease_ms))

    async def _send(self, call: S.Call[list[int]], items: list[Any]) -> list[int]:
        """Run an outcome script; if the call fails, its items are resends from now on."""
        try:
            return await self.ctx.scripts.run(call)
        except _KEEP_ON:  # cancelled: it may have been sent
            self.resent.update(it[0] for it in items)
            raise

    def _judge(self, what: str, items: list[Any], codes: list[int]) -> list[int]:
        """Count the refused items, one log line per kind of refusal; the codes to act on.

        FENCED, or GONE on a first send (the thief finished the run first), is a fence: the run
        executes twice. GONE on a resend is most likely this worker's own lost reply: counted
        apart, and then acted on as written (leases extended or freed, results recorded)."""
        fenced: list[Any] = []
        resent: list[Any] = []
        judged = list(codes)
        for i, (it, code) in enumerate(zip(items, codes, strict=True)):
            if code == _OK:
                continue
            if code == _GONE and it[0] in self.resent:
                resent.append(it)
                judged[i] = _OK
            else:
                fenced.append(it)
                judged[i] = _FENCED
        if self.resent:
            self.resent.difference_update(it[0] for it in items)
        if fenced or resent:
            self._count(what, fenced, resent)
        return judged

    def _count(self, what: str, fenced: list[Any], resent: list[Any]) -> None:
        m, q = self.ctx.metrics, self.ctx.queue
        for it in (*fenced, *resent):
            self.lost.discard(it[0])
        if fenced:
            m.fenced.labels(q, what).inc(len(fenced))
            if what == "ack":
                m.duplicates.labels(q, "worker").inc(len(fenced))
            ids = [it[1] or it[0] for it in fenced[:_NAMED]]
            log.warning("%s of %d run(s) refused: this consumer no longer owns their entries "
                        "(runs %s%s)", what, len(fenced), ", ".join(ids),
                        " ..." if len(fenced) > _NAMED else "",
                        extra={"queue": q, "run_ids": ids})  # fmt: skip
        if resent:
            m.resent_written.labels(q, what).inc(len(resent))
            ids = [it[1] or it[0] for it in resent[:_NAMED]]
            log.info("%s of %d run(s) sent again after a failed call found written already, "
                     "most likely by that call (runs %s%s)", what, len(resent), ", ".join(ids),
                     " ..." if len(resent) > _NAMED else "",
                     extra={"queue": q, "run_ids": ids})  # fmt: skip


def _taken(batch: list[Any]) -> list[Any]:
    """The items of a batch just written, emptying it: a later failure of the same flush
    pass puts back only what was not written (a resent outcome would be fenced)."""
    written = batch[:]
    batch.clear()
    return written
