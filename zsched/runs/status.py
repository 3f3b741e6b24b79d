"""Read-side views of a queue: one run's state, queue status, dead letters."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis.exceptions

from zsched.clock import ms_to_datetime, time_reply_ms
from zsched.errors import PayloadError, RunNotFound
from zsched.protocol.envelope import Envelope, decode
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.replies import ReplayCode
from zsched.protocol.text import lossy_text
from zsched.runs import outcomes as _outcomes
from zsched.store import counts as _counts
from zsched.store import scripts as S
from zsched.store.delayed import untag
from zsched.store.replies import dead_envelope, entry_payload

if TYPE_CHECKING:
    from zsched.context import QueueContext

#: How far back get_run looks through the dead-letter stream for a run id.
DEAD_SCAN_LIMIT = 10_000


@dataclass(frozen=True)
class RunStatus:
    """Where a run is and its times. state: scheduled, ready, running, done, dead or
    cancelled (`cancelled_at`; kept for the dedupe window). `cancel_requested`: a running
    run was asked to stop and its worker has not ended it yet."""

    run_id: str
    state: str
    task: str | None = None
    attempt: int | None = None
    run_at: datetime | None = None
    scheduled_for: datetime | None = None
    done_at: datetime | None = None
    dead_reason: str | None = None
    consumer: str | None = None
    idle_ms: int | None = None
    deliveries: int | None = None
    cancelled_at: datetime | None = None
    cancel_requested: bool | None = None
    #: A finished run (done, dead, cancelled): when it finished.
    finished_at: datetime | None = None
    #: Kept for tasks with keep_result=True (zsched/runs/outcomes.py): attempts made, the last
    #: attempt's duration, the handler's return value, or why it was not kept.
    attempts: int | None = None
    duration_ms: int | None = None
    result: Any = None
    result_error: str | None = None
    #: A scheduled run deferred by its task's limits: the task whose limit it waits for.
    waiting_for_limit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars(self).items()}


def _from_envelope(run_id: str, state: str, raw: bytes | None, **extra: Any) -> RunStatus:
    env: Envelope | None = None
    if raw:
        try:
            env = decode(untag(raw)[1], run_id)
        except PayloadError:
            env = None
    if env is None:
        return RunStatus(run_id, state, **extra)
    return RunStatus(
        run_id,
        state,
        task=env.task,
        attempt=env.attempt,
        run_at=ms_to_datetime(env.run_at_ms),
        scheduled_for=ms_to_datetime(env.scheduled_ms),
        **extra,
    )


def queue_run_reads(pipe: Any, k: QueueKeys, run_id: str) -> None:
    """The first round trip of get_run (sync or asyncio pipeline, executed with
    raise_on_error=False, read by first_reads): its record, its stream entry if zsched 0.2
    dispatched it (in `legacy_entries`, or in `entries` while that is still 0.2's hash: a
    string there refuses HGET), its completion and cancel times, its kept outcome."""
    pipe.hget(k.runs, run_id)
    pipe.hget(k.legacy_entries, run_id)
    pipe.hget(k.entries, run_id)
    pipe.zscore(k.done, run_id)
    pipe.zscore(k.cancelled, run_id)
    pipe.hget(k.outcomes, run_id)


def first_reads(replies: list[Any]) -> tuple[Any, Any, Any, Any, Any]:
    """queue_run_reads' replies: (raw, legacy entry, done_at, cancelled_at, outcome)."""
    raw, legacy, old_hash, done_at, cancelled_at, outcome = replies
    if isinstance(old_hash, redis.exceptions.ResponseError) and "WRONGTYPE" in str(old_hash):
        old_hash = None  # `entries` holds zsched 0.3's string: no 0.2 hash any more
    for reply in (raw, legacy, old_hash, done_at, cancelled_at, outcome):
        if isinstance(reply, Exception):
            raise reply
    return raw, legacy or old_hash, done_at, cancelled_at, outcome


_ENTRY_ID = re.compile(rb"\d+-\d+\Z")


def is_entry_id(raw: bytes | None) -> bool:
    """A value of `runs` that is a stream entry id: the run is on the stream, its envelope in
    that entry (dispatch.lua; lua/lib/current.lua's cur_entry)."""
    return raw is not None and _ENTRY_ID.match(raw) is not None


def stream_entry(raw: bytes | None, legacy: bytes | None) -> bytes | None:
    """The entry id of a live run on the ready stream, else None: its value in `runs` while it
    is there (is_entry_id), or for a run dispatched by zsched 0.2, which keeps its tagged
    value, the id in `legacy_entries` (`legacy`)."""
    if raw is None:
        return None
    return raw if is_entry_id(raw) else legacy


def stream_reads(pipe: Any, k: QueueKeys, run_id: str, entry: bytes) -> None:
    """The second round trip for a run on the stream: its pending row, its entry (for the
    envelope), and its cancel request. Execute with raise_on_error=False."""
    pipe.xpending_range(k.ready, GROUP, entry, entry, 1)
    pipe.xrange(k.ready, entry, entry)
    pipe.get(k.cancel_request(run_id))


def entry_envelope(rows: Any) -> bytes | None:
    """The envelope of an XRANGE reply of one entry, in either shape (None when it is gone)."""
    return entry_payload(rows[0][1])[0] if rows else None


#: Reads of get_run when a run's entry leaves the stream between its two round trips.
READ_TRIES = 3


def on_stream(
    run_id: str, raw: bytes, entry: bytes, replies: list[Any], last: bool = True
) -> RunStatus | None:
    """A live run on the stream, from stream_reads' replies: running (read by a worker, no
    NOGROUP: a group exists) or ready. None when the entry is gone, neither pending nor on
    the stream (the run finished or moved between the reads: read it again), unless `last`:
    then ready, without its envelope."""
    pending, rows, asked = replies
    if isinstance(pending, redis.exceptions.ResponseError) and "NOGROUP" in str(pending):
        pending = []  # no worker has joined yet
    for reply in (pending, rows, asked):
        if isinstance(reply, Exception):
            raise reply
    if not pending and not rows and not last:
        return None
    env = entry_envelope(rows) if raw == entry else raw
    if pending:
        return running(run_id, env, entry, pending[0], asked)
    return _from_envelope(run_id, "ready", env)


def scheduled(run_id: str, raw: bytes) -> RunStatus:
    """A live run not on the stream: in the delayed set, due when its value's tag says."""
    st = _from_envelope(run_id, "scheduled", raw)
    due = untag(raw)[0]
    return replace(st, run_at=ms_to_datetime(due)) if due is not None else st


def running(
    run_id: str, raw: bytes | None, entry: Any, pending: dict[str, Any], asked: Any
) -> RunStatus:
    """A run read by a worker: its XPENDING row, and whether its cancel was asked
    (`asked`: the cancel request key's value, the entry id it names)."""
    return _from_envelope(
        run_id, "running", raw, consumer=lossy_text(pending["consumer"]),
        idle_ms=int(pending["time_since_delivered"]),
        deliveries=int(pending["times_delivered"]),
        cancel_requested=lossy_text(asked or b"") == lossy_text(entry),
    )  # fmt: skip


def ended(run_id: str, done_at: Any, cancelled_at: Any) -> RunStatus | None:
    """A run done or cancelled within the dedupe window, else None (dead, or unknown)."""
    if done_at is not None:
        at = ms_to_datetime(int(float(done_at)))
        return RunStatus(run_id, "done", done_at=at, finished_at=at)
    if cancelled_at is not None:
        at = ms_to_datetime(int(float(cancelled_at)))
        return RunStatus(run_id, "cancelled", cancelled_at=at, finished_at=at)
    return None


def dead(run_id: str, fields: dict[bytes, Any]) -> RunStatus | None:
    """The run's status from a dead letter's fields, if the letter is this run's."""
    if lossy_text(fields.get(b"run_id", b"")) != run_id:
        return None
    dead_ms = fields.get(b"dead_at_ms")
    return _from_envelope(
        run_id, "dead", dead_envelope(fields), dead_reason=lossy_text(fields.get(b"reason", b"")),
        finished_at=ms_to_datetime(int(dead_ms)) if dead_ms and dead_ms.isdigit() else None,
    )  # fmt: skip


def not_found(k: QueueKeys, run_id: str) -> RunNotFound:
    return RunNotFound(f"no run {run_id!r} in queue {k.queue!r} (not live, done or dead)")


def get_run(r: Any, k: QueueKeys, run_id: str) -> RunStatus:
    for attempt in range(READ_TRIES):
        pipe = r.pipeline(transaction=False)
        queue_run_reads(pipe, k, run_id)
        raw, legacy, done_at, cancelled_at, outcome = first_reads(
            pipe.execute(raise_on_error=False)
        )
        entry = stream_entry(raw, legacy)
        if raw is None or entry is None:
            break
        pipe = r.pipeline(transaction=False)
        stream_reads(pipe, k, run_id, entry)
        replies = pipe.execute(raise_on_error=False)
        st = on_stream(run_id, raw, entry, replies, last=attempt == READ_TRIES - 1)
        if st is not None:
            return st
    if raw is not None:
        st = scheduled(run_id, raw)
        if st.task and r.zscore(k.limit_waiting(st.task), run_id) is not None:
            st = replace(st, waiting_for_limit=st.task)
        return st
    finished = ended(run_id, done_at, cancelled_at) or next(
        (found for _, f in _scan_dead(r, k) if (found := dead(run_id, f)) is not None), None
    )
    if finished is None:
        raise not_found(k, run_id)
    return _with_outcome(finished, outcome)


def _with_outcome(st: RunStatus, raw: bytes | None) -> RunStatus:
    """A finished run's status with its kept outcome (keep_result tasks), if any."""
    o = _outcomes.decode(raw) if raw else None
    if o is None:
        return st
    return replace(st, attempts=o.attempts, duration_ms=o.duration_ms, result=o.result,
                   result_error=o.result_error)  # fmt: skip


def _scan_dead(r: Any, k: QueueKeys) -> Iterable[tuple[bytes, dict[bytes, bytes]]]:
    end, seen = "+", 0
    while seen < DEAD_SCAN_LIMIT:
        batch = r.xrevrange(k.dead, end, "-", count=500)
        if not batch:
            return
        yield from batch
        seen += len(batch)
        if len(batch) < 500:
            return
        end = "(" + lossy_text(batch[-1][0])


@dataclass(frozen=True)
class QueueStatus:
    """A snapshot of one queue."""

    queue: str
    now_ms: int
    delayed: int
    due: int
    oldest_due_age_ms: int
    stream_length: int
    pending: int
    oldest_pending_idle_ms: int
    dead: int
    done_records: int
    stats: dict[str, int] = field(default_factory=dict)
    #: Paused by pause_queue (dispatchers move nothing): since when, and the note.
    paused: bool = False
    paused_ms: int | None = None
    pause_note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def queue_status_reads(pipe: Any, k: QueueKeys) -> None:
    """queue_status's pipeline after status.lua (sync or asyncio): the one reader of a
    queue's counts (zsched/store/counts.py), which the collector shares."""
    _counts.queue(pipe, k)


def make_queue_status(k: QueueKeys, delayed_reply: list[Any], replies: list[Any]) -> QueueStatus:
    """The QueueStatus of status.lua's reply and queue_status_reads' replies (executed with
    raise_on_error=False)."""
    c = _counts.decode(delayed_reply, replies)
    now_ms = time_reply_ms(c.time)
    head = c.head_ms
    oldest_due = max(0, now_ms - head) if head is not None and head <= now_ms else 0
    # An empty stream has no pending entry status reports (entries are deleted once acked).
    pending = (c.pending, c.oldest_pending_idle_ms) if c.stream_length else (0, 0)
    return QueueStatus(
        k.queue, now_ms, c.delayed, c.due, oldest_due, c.stream_length, pending[0], pending[1],
        c.dead, c.done, {lossy_text(a): int(b) for a, b in c.stats.items()},
        c.paused_ms is not None, c.paused_ms,
        lossy_text(c.pause_note) if c.pause_note else None,
    )  # fmt: skip


def queue_status(r: Any, scripts: S.Scripts, k: QueueKeys) -> QueueStatus:
    delayed_reply = scripts.run(S.status(k, now_ms=None))
    pipe = r.pipeline(transaction=False)
    queue_status_reads(pipe, k)
    return make_queue_status(k, delayed_reply, pipe.execute(raise_on_error=False))


@dataclass(frozen=True)
class DeadLetter:
    """One entry of the dead-letter stream."""

    entry_id: str
    run_id: str
    reason: str
    dead_at: datetime | None
    envelope: bytes
    task: str | None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k != "envelope"}
        d["dead_at"] = self.dead_at.isoformat() if self.dead_at else None
        return d


def _dead_letter(entry_id: bytes, f: dict[bytes, bytes]) -> DeadLetter:
    raw = dead_envelope(f)
    try:
        task: str | None = decode(raw, lossy_text(f.get(b"run_id", b""))).task
    except PayloadError:
        task = None
    at = f.get(b"dead_at_ms")
    return DeadLetter(
        lossy_text(entry_id), lossy_text(f.get(b"run_id", b"")), lossy_text(f.get(b"reason", b"")),
        ms_to_datetime(int(at)) if at else None, raw, task,
    )  # fmt: skip


def dead_letters(r: Any, k: QueueKeys, count: int, start: str = "-") -> list[DeadLetter]:
    return [_dead_letter(i, f) for i, f in r.xrange(k.dead, start, "+", count=count)]


_REPLAYED: dict[int, str] = {ReplayCode.REPLAYED: "replayed", ReplayCode.NOT_FOUND: "missing",
             ReplayCode.LIVE: "live"}  # fmt: skip


def replay_dead(ctx: QueueContext, entry_ids: Iterable[str] | None) -> dict[str, int]:
    """Returns counts: replayed, missing, live (a run with that id is live), undecodable."""
    r, k = ctx.redis, ctx.keys
    if entry_ids is None:
        letters = [_dead_letter(i, f) for i, f in r.xrange(k.dead, "-", "+")]
    else:
        entry_ids = list(entry_ids)  # read twice: a generator would be empty the second time
        letters = []
        for eid in entry_ids:
            rows = r.xrange(k.dead, eid, eid)
            letters.extend(_dead_letter(i, f) for i, f in rows)
    counts = {"replayed": 0, "missing": 0, "live": 0, "undecodable": 0}
    if entry_ids is not None:
        counts["missing"] = len(entry_ids) - len(letters)
    groups: list[tuple[str, str, bytes]] = []
    now = ctx.local_ms()
    for d in letters:
        try:
            env = decode(d.envelope, d.run_id)
        except PayloadError:
            counts["undecodable"] += 1
            continue
        # No lease_ms: a replayed rule run holds no overlap lease, like a backfill (the rule
        # gave it up; its lease may be a later slot's now). docs/policies.md says why.
        fresh = Envelope(env.run_id, env.task, env.payload, now, env.scheduled_ms, now,
                         1, env.schedule_id, env.max_attempts)  # fmt: skip
        groups.append((d.entry_id, env.run_id, fresh.encode()))
    for i in range(0, len(groups), S.MAX_BATCH):
        codes = ctx.scripts.run(S.replay(k, groups[i : i + S.MAX_BATCH], now_ms=ctx.clock.now_ms()))
        for c in codes:
            counts[_REPLAYED[c]] += 1
    return counts


def purge_dead(r: Any, k: QueueKeys, entry_ids: Iterable[str] | None) -> int:
    if entry_ids is None:
        n = int(r.xlen(k.dead))
        r.delete(k.dead)
        return n
    ids = list(entry_ids)
    return int(r.xdel(k.dead, *ids)) if ids else 0
