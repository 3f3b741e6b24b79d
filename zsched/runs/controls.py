"""Run controls as script calls: reschedule, enqueue with a conflict mode (replace,
debounce), cancel anywhere (revoke) and the worker's end of a cancelled run (discard). Each
wrapper builds a `scripts.Call` with its decoder, so the same call runs on the sync `Scripts`
and the asyncio `AsyncScripts`; the App's thin methods live in zsched/control_api.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from zsched.errors import ScriptError
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.replies import EnqueueCode
from zsched.protocol.runids import rule_of
from zsched.store.replies import int_list as _int_list
from zsched.store.replies import now_arg as _now
from zsched.store.scripts import Call

#: Dead letters reschedule reads (newest first) to tell a dead run from an unknown one.
DEAD_SCAN = 1000


class RescheduleOutcome(Enum):
    """What reschedule found (reschedule.lua's reply codes, named once here)."""

    #: The run was waiting in the delayed set and now waits for the new due time.
    MOVED = 1
    #: No run with that id: never enqueued, cancelled, or gone past the dedupe window.
    NOT_FOUND = 0
    #: Dispatched: on the ready stream, not read by a worker yet.
    READY = 2
    #: Read by a worker (running, or held until its hold expires).
    RUNNING = 3
    #: Finished; its completion record is kept for the dedupe window.
    DONE = 4
    #: Dead-lettered (found among the newest dead letters).
    DEAD = 5


@dataclass(frozen=True, slots=True)
class RescheduleResult:
    """The answer of reschedule: `.moved` is True when the run now waits for `due_ms`."""

    run_id: str
    outcome: RescheduleOutcome
    #: The new due (epoch ms) when moved, else None.
    due_ms: int | None

    @property
    def moved(self) -> bool:
        return self.outcome is RescheduleOutcome.MOVED

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome.name.lower(), "moved": self.moved,
                "due_ms": self.due_ms}  # fmt: skip


def _pair(reply: Any) -> tuple[int, int]:
    if not isinstance(reply, list) or len(reply) != 2:
        raise ScriptError(f"expected a {{code, due_ms}} reply, got {reply!r}")
    return int(reply[0]), int(reply[1])


def reschedule(
    k: QueueKeys, run_id: str, run_at: int | str, *, now_ms: int | None, dead_scan: int = DEAD_SCAN
) -> Call[RescheduleResult]:
    """Move a delayed run to `run_at` (epoch ms, or "+N": N ms after Redis TIME)."""

    def decode(reply: Any) -> RescheduleResult:
        code, due = _pair(reply)
        try:
            outcome = RescheduleOutcome(code)
        except ValueError:
            raise ScriptError(f"reschedule: unknown reply code {code}") from None
        return RescheduleResult(run_id, outcome, due if code == 1 else None)

    return Call(
        "reschedule",
        [k.delayed, k.runs, k.entries, k.ready, k.done, k.dead, k.wake],
        [_now(now_ms), run_id, run_at, dead_scan, GROUP],
        decode,
    )


class EnqueueOutcome(Enum):
    """What an enqueue did with its run id (reported on the returned EnqueuedId)."""

    #: A new run: no live run had the id.
    ENQUEUED = "enqueued"
    #: The id is live (delayed under "keep", or already on the ready stream): nothing changed.
    DUPLICATE = "duplicate"
    #: The id completed within the dedupe window: nothing changed.
    DUPLICATE_DONE = "duplicate_done"
    #: on_conflict="replace": the waiting run took the new payload and due time.
    REPLACED = "replaced"
    #: on_conflict="debounce": the waiting run took the new payload, its due pushed back (never
    #: past max_delay after the first enqueue).
    DEBOUNCED = "debounced"


#: enqueue's conflict modes: what happens when the run id is already waiting.
CONFLICT_MODES = ("keep", "replace", "debounce")
#: What an EnqueueCode means for the caller (enqueue.lua's and replace.lua's replies).
ENQUEUE_OUTCOMES: dict[int, EnqueueOutcome] = {
    EnqueueCode.ENQUEUED: EnqueueOutcome.ENQUEUED,
    EnqueueCode.REPLACED: EnqueueOutcome.REPLACED,
    EnqueueCode.DUPLICATE_LIVE: EnqueueOutcome.DUPLICATE,
    EnqueueCode.DUPLICATE_DONE: EnqueueOutcome.DUPLICATE_DONE,
}


@dataclass(frozen=True, slots=True)
class ReplaceResult:
    """The answer of replace.lua: the outcome and the due written (None when unchanged)."""

    run_id: str
    outcome: EnqueueOutcome
    due_ms: int | None


def replace(
    k: QueueKeys,
    group: tuple[str, int | str, str, bytes],
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    max_envelope_bytes: int,
    max_delay_ms: int | None = None,
) -> Call[ReplaceResult]:
    """Enqueue one run (run_id, run_at, task, envelope), or replace the waiting run with that
    id: as given (max_delay_ms None), or debounced (due never past max_delay_ms after the
    waiting run's first enqueue)."""
    run_id = group[0]

    def decode(reply: Any) -> ReplaceResult:
        code, due = _pair(reply)
        if code not in ENQUEUE_OUTCOMES:
            raise ScriptError(f"replace: unknown reply code {code}")
        outcome = ENQUEUE_OUTCOMES[code]
        if outcome is EnqueueOutcome.REPLACED and max_delay_ms is not None:
            outcome = EnqueueOutcome.DEBOUNCED
        return ReplaceResult(run_id, outcome, due if due >= 0 else None)

    return Call(
        "replace",
        [k.delayed, k.runs, k.done, k.stats, k.wake, k.debounce],
        [_now(now_ms), dedupe_window_ms, max_envelope_bytes, *group,
         "" if max_delay_ms is None else max_delay_ms],
        decode,
    )  # fmt: skip


class CancelOutcome(Enum):
    """What cancel found and did (revoke.lua's reply codes, named once here)."""

    #: Removed from the delayed set before it was due.
    CANCELLED_DELAYED = 1
    #: Dispatched but not read by any worker: its stream entry was deleted.
    CANCELLED_READY = 2
    #: Running: the worker holding it was asked to stop; the run ends `cancelled` when the
    #: handler stops (an async handler's task is cancelled; a sync one sees
    #: `current_run().cancel_requested`).
    REQUESTED = 3
    #: No such run (never enqueued, or its records are gone).
    NOT_FOUND = 0
    #: It finished already (a completion record is kept).
    DONE = 4
    #: It was cancelled already.
    ALREADY_CANCELLED = 5


@dataclass(frozen=True, slots=True)
class CancelResult:
    """The answer of cancel. True (as a bool) when the run was removed by this call; a running
    run is `.requested` instead, and ends cancelled once its handler stops."""

    run_id: str
    outcome: CancelOutcome
    #: The removed run's envelope (codes 1 and 2), to free a rule's overlap lease.
    envelope: bytes | None = None

    def __bool__(self) -> bool:
        return self.cancelled

    @property
    def cancelled(self) -> bool:
        return self.outcome in (CancelOutcome.CANCELLED_DELAYED, CancelOutcome.CANCELLED_READY)

    @property
    def requested(self) -> bool:
        return self.outcome is CancelOutcome.REQUESTED

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome.name.lower(),
                "cancelled": self.cancelled, "requested": self.requested}  # fmt: skip


def revoke(
    k: QueueKeys, run_id: str, *, now_ms: int | None, dedupe_window_ms: int
) -> Call[CancelResult]:
    """Cancel a run wherever it is (delayed, ready: removed; running: asked)."""

    def decode(reply: Any) -> CancelResult:
        if not isinstance(reply, list) or len(reply) != 2:
            raise ScriptError(f"revoke: expected {{code, envelope}}, got {reply!r}")
        try:
            outcome = CancelOutcome(int(reply[0]))
        except ValueError:
            raise ScriptError(f"revoke: unknown reply code {reply[0]!r}") from None
        env = bytes(reply[1]) if reply[1] else None
        return CancelResult(run_id, outcome, env)

    keys = [k.delayed, k.runs, k.entries, k.ready, k.done, k.cancelled, k.stats,
            k.cancel_request(run_id)]  # fmt: skip
    args: list[Any] = [_now(now_ms), run_id, GROUP, dedupe_window_ms]
    sid = rule_of(run_id)
    if sid is not None:  # a rule's fire: its lease ends in this call (none is freed if not its)
        keys += [k.lease(sid), k.rule_waiting, k.wake]
        args.append(sid)
    return Call("revoke", keys, args, decode)


def discard(
    k: QueueKeys,
    consumer: str,
    pairs: Sequence[tuple[str, str]],
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    leases: Sequence[tuple[str, str]] = (),
) -> Call[list[int]]:
    """End held runs whose cancel was requested. pairs: (entry_id, run_id); leases:
    (schedule_id, run_id) of the rule runs among them that hold an overlap lease, ended in the
    same call. Reply: a HoldCode per pair."""
    return Call(
        "discard",
        [k.ready, k.runs, k.entries, k.cancelled, k.stats, k.rule_waiting, k.delayed, k.wake,
         k.done, *[k.lease(sid) for sid, _ in leases]],
        [_now(now_ms), GROUP, consumer, dedupe_window_ms, *[x for p in pairs for x in p],
         *[x for p in leases for x in p]],
        _int_list,
    )  # fmt: skip


def pause(k: QueueKeys, note: str | None, *, now_ms: int | None) -> Call[bool]:
    """Pause a queue (partition). Reply: True paused now, False already paused."""
    return Call("pause", [k.control], [_now(now_ms), note or ""], lambda r: int(r) == 1)


def resume(k: QueueKeys, *, now_ms: int | None) -> Call[bool]:
    """Resume a paused queue (partition), waking its dispatchers. Reply: True resumed."""
    return Call("resume", [k.control, k.wake], [_now(now_ms)], lambda r: int(r) == 1)
