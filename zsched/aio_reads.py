"""AsyncApp's read-side calls on an asyncio client: one run's state, queue status, dead letters.

The decoding is zsched.runs.status's (the same RunStatus, QueueStatus and DeadLetter from the same
replies); only the round trips differ, awaited instead of blocking.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import redis.exceptions

from zsched.clock import ms_to_datetime, time_reply_ms
from zsched.errors import RunNotFound
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.text import lossy_text
from zsched.rules import ledger
from zsched.runs import status as _inspect
from zsched.store import scripts as S
from zsched.store.delayed import untag


async def _pending_one(r: Any, k: QueueKeys, entry: Any) -> list[Any]:
    try:
        return list(await r.xpending_range(k.ready, GROUP, entry, entry, 1))
    except redis.exceptions.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        return []  # no worker has joined yet


async def get_run(r: Any, k: QueueKeys, run_id: str) -> _inspect.RunStatus:
    """inspect.get_run, awaited: the same fields (a scheduled run's limit wait, a running
    run's cancel request, a finished run's finished_at and kept outcome)."""
    pipe = r.pipeline(transaction=False)
    pipe.hget(k.runs, run_id)
    pipe.hget(k.entries, run_id)
    pipe.zscore(k.done, run_id)
    pipe.zscore(k.cancelled, run_id)
    pipe.hget(k.outcomes, run_id)
    raw, entry, done_at, cancelled_at, outcome = await pipe.execute()
    if raw is not None and entry is None:
        st = _inspect._from_envelope(run_id, "scheduled", raw)
        due = untag(raw)[0]
        if due is not None:
            st = replace(st, run_at=ms_to_datetime(due))
        if st.task and await r.zscore(k.limit_waiting(st.task), run_id) is not None:
            st = replace(st, waiting_for_limit=st.task)
        return st
    if raw is not None and entry is not None:
        pending = await _pending_one(r, k, entry)
        if pending:
            p = pending[0]
            asked = lossy_text(await r.get(k.cancel_request(run_id)) or b"") == lossy_text(entry)
            return _inspect._from_envelope(
                run_id, "running", raw, consumer=lossy_text(p["consumer"]),
                idle_ms=int(p["time_since_delivered"]), deliveries=int(p["times_delivered"]),
                cancel_requested=asked,
            )  # fmt: skip
        return _inspect._from_envelope(run_id, "ready", raw)
    finished = await _finished(r, k, run_id, done_at, cancelled_at)
    if finished is None:
        raise RunNotFound(f"no run {run_id!r} in queue {k.queue!r} (not live, done or dead)")
    return _inspect._with_outcome(finished, outcome)


async def _finished(
    r: Any, k: QueueKeys, run_id: str, done_at: Any, cancelled_at: Any
) -> _inspect.RunStatus | None:
    if done_at is not None:
        at = ms_to_datetime(int(float(done_at)))
        return _inspect.RunStatus(run_id, "done", done_at=at, finished_at=at)
    if cancelled_at is not None:
        at = ms_to_datetime(int(float(cancelled_at)))
        return _inspect.RunStatus(run_id, "cancelled", cancelled_at=at, finished_at=at)
    end, seen = "+", 0
    while seen < _inspect.DEAD_SCAN_LIMIT:
        batch = await r.xrevrange(k.dead, end, "-", count=500)
        for _entry_id, fields in batch:
            if lossy_text(fields.get(b"run_id", b"")) == run_id:
                dead_ms = fields.get(b"dead_at_ms")
                return _inspect._from_envelope(
                    run_id, "dead", fields.get(b"envelope"),
                    dead_reason=lossy_text(fields.get(b"reason", b"")),
                    finished_at=ms_to_datetime(int(dead_ms)) if dead_ms and dead_ms.isdigit() else None,
                )  # fmt: skip
        seen += len(batch)
        if len(batch) < 500:
            break
        end = "(" + lossy_text(batch[-1][0])
    return None


async def _pending_summary(r: Any, k: QueueKeys) -> tuple[int, int]:
    try:
        summary = await r.xpending(k.ready, GROUP)
        pending = int(summary["pending"])
        if not pending:
            return 0, 0
        rows = await r.xpending_range(k.ready, GROUP, "-", "+", 100)
        return pending, max((int(x["time_since_delivered"]) for x in rows), default=0)
    except redis.exceptions.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        return 0, 0


async def queue_status(r: Any, scripts: S.AsyncScripts, k: QueueKeys) -> _inspect.QueueStatus:
    """inspect.queue_status, awaited."""
    sec, usec, delayed, due, head, _exact = await scripts.run(S.status(k, now_ms=None))
    pipe = r.pipeline(transaction=False)
    pipe.xlen(k.ready)
    pipe.xlen(k.dead)
    pipe.zcard(k.done)
    pipe.hgetall(k.stats)
    pipe.hmget(k.control, "paused_ms", "pause_note")
    xlen, dead, done, stats, (paused_ms, note) = await pipe.execute()
    now_ms = time_reply_ms((sec, usec))
    oldest_due = max(0, now_ms - int(head)) if head is not None and int(head) <= now_ms else 0
    pending, oldest_idle = await _pending_summary(r, k) if xlen else (0, 0)
    return _inspect.QueueStatus(
        k.queue, now_ms, int(delayed), int(due), oldest_due, int(xlen), pending, oldest_idle,
        int(dead), int(done), {lossy_text(a): int(b) for a, b in stats.items()},
        paused_ms is not None, int(paused_ms) if paused_ms is not None else None,
        lossy_text(note) if note else None,
    )  # fmt: skip


async def dead_letters(r: Any, k: QueueKeys, count: int, start: str) -> list[_inspect.DeadLetter]:
    """inspect.dead_letters, awaited."""
    rows = await r.xrange(k.dead, start, "+", count=count)
    return [_inspect._dead_letter(i, f) for i, f in rows]


async def purge_dead(r: Any, k: QueueKeys, entry_ids: list[str] | None) -> int:
    """inspect.purge_dead, awaited."""
    if entry_ids is None:
        pipe = r.pipeline(transaction=False)
        pipe.xlen(k.dead)
        pipe.delete(k.dead)
        n, _ = await pipe.execute()
        return int(n)
    return int(await r.xdel(k.dead, *entry_ids)) if entry_ids else 0


async def history(r: Any, k: QueueKeys, schedule_id: str, count: int) -> list[dict[str, Any]]:
    """ledger.history, awaited."""
    return ledger.rows(await r.xrevrange(k.ledger(schedule_id), "+", "-", count=count))
