"""The console's backend over `zsched.AsyncApp`: what AsyncApp offers runs on the event loop.

`AsyncBackend` wraps a `SyncBackend` and replaces, method by method, what the AsyncApp API
(plus a few bounded reads with the asyncio client) can serve: the run page, the dead letters
and their bulk counts, a rule's page, the paused-queue banner and every action. The rest has
no AsyncApp twin and stays on the sync path, which `Console.call` runs in the thread pool
(THREAD_PATH).

redis.asyncio clients belong to the event loop that made them, so the AsyncApps are made per
loop (a host normally has one; Starlette's TestClient starts one per request) and closed when
that loop shuts its async generators down (asyncio.run and uvicorn do, before closing it).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import zsched.web.reads as reads
import zsched.web.rule_reads as rule_reads
import zsched.web.words as words
from zsched.app import AsyncApp
from zsched.errors import ScheduleNotFound, UnreadableRule
from zsched.rules.spec import Spec, State, decode_rule
from zsched.runs.status import entry_envelope, is_entry_id
from zsched.web.backend import (
    SyncBackend,
    dead_rows,
    edited_options,
    rule_view,
    run_view,
    scan_note,
    unreadable_view,
)
from zsched.web.run_controls import checked_note

#: Backend methods that keep the sync path (the console's own bounded reads, the audit and
#: the simulator: no AsyncApp method does them), run in Starlette's thread pool.
THREAD_PATH = ("overview", "delayed", "rules", "simulate")


async def _closer(apps: dict[str, AsyncApp]) -> AsyncIterator[None]:
    """Suspended for the life of its loop; the loop's shutdown_asyncgens closes the apps."""
    try:
        yield
    finally:
        for a in apps.values():
            await a.aclose()


class AsyncBackend:
    """The console's backend: AsyncApp where it has the operation, else the SyncBackend."""

    def __init__(self, sync: SyncBackend) -> None:
        self.sync = sync
        #: Per event loop: {queue: AsyncApp} and the generator that closes them.
        self._loops: weakref.WeakKeyDictionary[Any, tuple[dict[str, AsyncApp], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sync, name)  # THREAD_PATH methods, and app()/part() for pages

    async def aio(self, queue: str) -> AsyncApp:
        """The AsyncApp of `queue` on the running loop (made on first use, sharing the App)."""
        app = self.sync.app(queue)  # LookupError for a queue not served
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None:
            apps: dict[str, AsyncApp] = {}
            closer = _closer(apps)
            await closer.__anext__()
            held = self._loops[loop] = (apps, closer)
        apps = held[0]
        if queue not in apps:
            apps[queue] = AsyncApp.from_app(app)
        return apps[queue]

    # -- pages --------------------------------------------------------------------------------

    async def run(self, queue: str, run_id: str) -> dict[str, Any]:
        """SyncBackend.run, awaited: AsyncApp.get_run, then the envelope (HGET, or a bounded
        newest-first scan of the dead letters)."""
        aio = await self.aio(queue)
        st = await aio.get_run(run_id)
        env = None
        if st.state not in ("done", "cancelled"):
            k = aio.app.keys_for_run(run_id)
            if st.state != "dead":
                raw = await aio.redis.hget(k.runs, run_id)
                if is_entry_id(raw):  # on the stream
                    raw = entry_envelope(await aio.redis.xrange(k.ready, raw, raw))
                env = reads.envelope_of(raw, run_id)
            else:
                end: str | None = "+"
                seen = 0
                while end is not None and env is None:
                    batch = await aio.redis.xrevrange(k.dead, end, "-", count=reads.DEAD_BATCH)
                    found, end, seen = reads.dead_hit(batch, run_id, seen)
                    env = None if found is None else reads.envelope_of(found, run_id)
        return run_view(st, env)

    async def rule(self, queue: str, schedule_id: str) -> dict[str, Any]:
        """SyncBackend.rule, awaited: one pipeline (spec, state, next fire, the audit's ledger
        read), TIME, then AsyncApp.schedule_history."""
        aio = await self.aio(queue)
        home = aio.app.rule_home(schedule_id)
        k = home.keys
        pipe = aio.redis.pipeline(transaction=False)
        pipe.hget(k.rules, schedule_id)
        pipe.hget(k.rule_state, schedule_id)
        pipe.zscore(k.rule_next, schedule_id)
        pipe.xrevrange(k.ledger(schedule_id), "+", "-", count=rule_reads.AUDIT_LEDGER_MAX)
        pipe.hget(k.rule_triggers, schedule_id)
        raw, raw_state, nxt, audit_ledger, raw_past = await pipe.execute()
        sec, _usec = await aio.redis.time()  # not in the pipeline: TIME has no key to route by
        ledger = await aio.schedule_history(schedule_id, reads.PAGE_MAX)
        try:
            spec, state = _decode_rule(home, schedule_id, raw, raw_state)
        except UnreadableRule as exc:  # its page says why, and offers to remove it
            return unreadable_view(exc, nxt, ledger)
        now = int(sec) * 1000
        missing = rule_reads.unaccounted(spec, state, audit_ledger, now, raw_past)
        return rule_view(spec, state, None if nxt is None else int(nxt), now, missing, ledger)

    async def dead(self, queue: str, cursor: str, task: str, reason: str) -> dict[str, Any]:
        """SyncBackend.dead, awaited (AsyncApp.dead_letters and status)."""
        aio = await self.aio(queue)
        if task or reason:
            m = await self._matching(aio, task, reason, keep=reads.PAGE_MAX)
            letters, nxt = m.letters, None
            count, complete = len(m.entry_ids), m.complete
        else:
            start = "(" + cursor if cursor else "-"
            letters = await aio.dead_letters(count=reads.PAGE_MAX, start=start)
            nxt = letters[-1].entry_id if len(letters) == reads.PAGE_MAX else None
            count, complete = (await aio.status()).dead, True
        return {"rows": dead_rows(letters), "next_cursor": nxt, "count": count,
                "complete": complete}  # fmt: skip

    async def dead_count(self, queue: str, task: str, reason: str) -> reads.DeadMatch:
        return await self._matching(await self.aio(queue), task, reason)

    @staticmethod
    async def _matching(aio: AsyncApp, task: str, reason: str, keep: int = 0) -> reads.DeadMatch:
        """reads.dead_matching, awaited (the same bounded scan)."""
        scan = reads.DeadScan(task, reason, keep)
        start: str | None = "-"
        while start is not None:
            start = scan.feed(await aio.dead_letters(count=reads.DEAD_BATCH, start=start))
        return scan.result()

    async def pauses(self) -> dict[str, str]:
        """RunControls.pauses, awaited (one pipelined HMGET per partition and queue)."""
        out: dict[str, str] = {}
        for q in self.sync.apps:
            aio = await self.aio(q)
            pipe = aio.redis.pipeline(transaction=False)
            for v in aio.app.partition_views():
                pipe.hmget(v.keys.control, "paused_ms", "pause_note")
            for paused_ms, note in await pipe.execute():
                if paused_ms is not None:
                    text = note.decode() if isinstance(note, bytes) else note
                    out[q] = words.paused_line(int(paused_ms), text)
                    break
        return out

    # -- actions: each one awaited AsyncApp call (some run App code in a thread themselves) --

    async def cancel(self, queue: str, run_id: str) -> str:
        res = await (await self.aio(queue)).cancel(run_id)
        return words.cancelled(res.outcome.name.lower(), run_id)

    async def reschedule(
        self, queue: str, run_id: str, at: datetime | None, delay_s: float | None
    ) -> str:
        if (at is None) == (delay_s is None):
            raise ValueError("give a new due time, or a delay in seconds (one of them)")
        aio = await self.aio(queue)
        if at is not None:
            res = await aio.reschedule(run_id, run_at=at)
        else:
            res = await aio.reschedule(run_id, delay=delay_s)
        return words.rescheduled(res.outcome.name.lower(), run_id, res.due_ms)

    async def run_now(self, queue: str, schedule_id: str, force: bool) -> str:
        fire = await (await self.aio(queue)).run_schedule_now(schedule_id, force=force)
        return words.fired_now(fire.outcome.value, schedule_id, fire.run_id)

    async def pause(
        self, queue: str, schedule_id: str, note: str | None = None, by: str | None = None
    ) -> str:
        ok = await (await self.aio(queue)).pause_schedule(schedule_id, checked_note(note), by)
        return f"paused rule {schedule_id}" if ok else f"rule {schedule_id} was already paused"

    async def pause_queue(self, queue: str, note: str | None) -> str:
        ok = await (await self.aio(queue)).pause_queue(checked_note(note))
        return (f"paused queue {queue}: no run is dispatched until it resumes" if ok
                else f"queue {queue} was already paused")  # fmt: skip

    async def resume_queue(self, queue: str) -> str:
        ok = await (await self.aio(queue)).resume_queue()
        return f"resumed queue {queue}" if ok else f"queue {queue} was not paused"

    async def resume(self, queue: str, schedule_id: str) -> str:
        ok = await (await self.aio(queue)).resume_schedule(schedule_id)
        return f"resumed rule {schedule_id}" if ok else f"rule {schedule_id} was not paused"

    async def remove(self, queue: str, schedule_id: str) -> str:
        ok = await (await self.aio(queue)).unschedule(schedule_id)
        return f"removed rule {schedule_id}" if ok else f"no rule {schedule_id}"

    async def edit(self, queue: str, schedule_id: str, changes: dict[str, Any]) -> str:
        """SyncBackend.edit, awaited: the stored rule read, the edit validated, then
        AsyncApp.schedule."""
        aio = await self.aio(queue)
        home = aio.app.rule_home(schedule_id)
        pipe = aio.redis.pipeline(transaction=False)
        pipe.hget(home.keys.rules, schedule_id)
        pipe.hget(home.keys.rule_state, schedule_id)
        spec, _state = _decode_rule(home, schedule_id, *await pipe.execute())
        await aio.schedule(schedule_id, spec.task, **edited_options(spec, schedule_id, changes))
        return f"saved rule {schedule_id}"

    async def backfill(self, queue: str, schedule_id: str, start: datetime, end: datetime) -> str:
        n = await (await self.aio(queue)).backfill(schedule_id, start, end)
        return f"backfill of {schedule_id}: {n} run(s) enqueued"

    async def replay(self, queue: str, entry_ids: list[str]) -> str:
        counts = await (await self.aio(queue)).replay_dead(entry_ids)
        return "replayed: " + ", ".join(f"{k} {v}" for k, v in counts.items())

    async def purge(self, queue: str, entry_ids: list[str]) -> str:
        n = await (await self.aio(queue)).purge_dead(entry_ids)
        return f"purged {n} dead letter(s)"

    async def replay_matching(self, queue: str, task: str, reason: str) -> str:
        m = await self._matching(await self.aio(queue), task, reason)
        if not m.entry_ids:
            return "no dead letter matches"
        return await self.replay(queue, m.entry_ids) + scan_note(m)

    async def purge_matching(self, queue: str, task: str, reason: str) -> str:
        m = await self._matching(await self.aio(queue), task, reason)
        return await self.purge(queue, m.entry_ids) + scan_note(m)


def _decode_rule(
    home: Any, sid: str, raw: bytes | None, raw_state: bytes | None
) -> tuple[Spec, State]:
    if raw is None:
        raise ScheduleNotFound(f"no schedule {sid!r} in queue {home.queue!r}")
    return decode_rule(sid, raw, raw_state)  # UnreadableRule, naming it
