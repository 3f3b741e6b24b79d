"""AsyncApp's read-side calls on an asyncio client: one run's state, queue status, dead letters.

The decoding is zsched.runs.status's (the same RunStatus, QueueStatus and DeadLetter from the same
replies); only the round trips differ, awaited instead of blocking.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import lossy_text
from zsched.rules import ledger
from zsched.runs import status as _inspect
from zsched.store import scripts as S


async def get_run(r: Any, k: QueueKeys, run_id: str) -> _inspect.RunStatus:
    """inspect.get_run, awaited: the same fields (a scheduled run's limit wait, a running
    run's cancel request, a finished run's finished_at and kept outcome)."""
    for attempt in range(_inspect.READ_TRIES):
        pipe = r.pipeline(transaction=False)
        _inspect.queue_run_reads(pipe, k, run_id)
        replies = await pipe.execute(raise_on_error=False)
        raw, legacy, done_at, cancelled_at, outcome = _inspect.first_reads(replies)
        entry = _inspect.stream_entry(raw, legacy)
        if raw is None or entry is None:
            break
        pipe = r.pipeline(transaction=False)
        _inspect.stream_reads(pipe, k, run_id, entry)
        replies = await pipe.execute(raise_on_error=False)
        last = attempt == _inspect.READ_TRIES - 1
        st = _inspect.on_stream(run_id, raw, entry, replies, last=last)
        if st is not None:
            return st
    if raw is not None:
        st = _inspect.scheduled(run_id, raw)
        if st.task and await r.zscore(k.limit_waiting(st.task), run_id) is not None:
            st = replace(st, waiting_for_limit=st.task)
        return st
    finished = _inspect.ended(run_id, done_at, cancelled_at) or await _dead(r, k, run_id)
    if finished is None:
        raise _inspect.not_found(k, run_id)
    return _inspect._with_outcome(finished, outcome)


async def _dead(r: Any, k: QueueKeys, run_id: str) -> _inspect.RunStatus | None:
    """The run among the newest DEAD_SCAN_LIMIT dead letters (inspect._scan_dead, awaited)."""
    end, seen = "+", 0
    while seen < _inspect.DEAD_SCAN_LIMIT:
        batch = await r.xrevrange(k.dead, end, "-", count=500)
        for _entry_id, fields in batch:
            st = _inspect.dead(run_id, fields)
            if st is not None:
                return st
        seen += len(batch)
        if len(batch) < 500:
            break
        end = "(" + lossy_text(batch[-1][0])
    return None


async def queue_status(r: Any, scripts: S.AsyncScripts, k: QueueKeys) -> _inspect.QueueStatus:
    """inspect.queue_status, awaited."""
    delayed_reply = await scripts.run(S.status(k, now_ms=None))
    pipe = r.pipeline(transaction=False)
    _inspect.queue_status_reads(pipe, k)
    return _inspect.make_queue_status(k, delayed_reply, await pipe.execute(raise_on_error=False))


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
