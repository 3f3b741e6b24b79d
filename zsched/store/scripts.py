"""One typed wrapper per Lua script.

Each wrapper builds a `Call` (script name, KEYS, ARGV, reply decoder) so the same call runs
on a sync or an asyncio client, alone or in a pipeline. `Scripts`/`AsyncScripts` (loading and
running, zsched/store/loader.py; re-exported here) register the sources with redis-py
(EVALSHA, reload after NOSCRIPT, pipeline-safe) and decode every reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.limits import MAX_BATCH as MAX_BATCH
from zsched.protocol.runids import rule_of
from zsched.protocol.text import text
from zsched.store.loader import ALIASES as ALIASES
from zsched.store.loader import NAMES as NAMES
from zsched.store.loader import AsyncScripts as AsyncScripts
from zsched.store.loader import Call as Call
from zsched.store.loader import Scripts as Scripts
from zsched.store.loader import lua_dir as lua_dir
from zsched.store.loader import sha as sha
from zsched.store.loader import source as source
from zsched.store.replies import flatten as _flatten
from zsched.store.replies import int_list as _int_list
from zsched.store.replies import now_arg as _now
from zsched.store.replies import tag as _tag
from zsched.store.rule_scripts import FireArgs as FireArgs
from zsched.store.rule_scripts import FireResult as FireResult
from zsched.store.rule_scripts import backfill as backfill
from zsched.store.rule_scripts import extend as extend
from zsched.store.rule_scripts import fire as fire
from zsched.store.rule_scripts import schedule as schedule
from zsched.store.rule_scripts import unlease as unlease
from zsched.store.rule_scripts import unschedule as unschedule

T = TypeVar("T")


# -- wrappers ---------------------------------------------------------------------------------


def enqueue(
    k: QueueKeys,
    runs: Sequence[tuple[str, int, str, bytes]],
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    max_envelope_bytes: int,
) -> Call[list[int]]:
    """runs: (run_id, run_at_ms, task, envelope). Reply: an EnqueueCode per run.

    A run due at epoch ms (not "+N") is sent as the value `runs` stores, its due tag before
    the envelope (docs/protocol.md, enqueue.lua): the script checks the tag and builds no
    value (~2.7 k fewer Redis instructions a run)."""
    args: list[Any] = [_now(now_ms), dedupe_window_ms, max_envelope_bytes]
    for run_id, at, task, env in runs:
        if type(at) is int and 0 <= at < 1 << 48 and type(env) is bytes:
            env = _tag(at, env)
        args += (run_id, at, task, env)
    return Call("enqueue", [k.delayed, k.runs, k.done, k.stats, k.wake], args, _int_list)


@dataclass(frozen=True, slots=True)
class DispatchResult:
    moved: int
    next_due_ms: int | None
    now_ms: int
    #: Nothing moved because the stream holds max_backlog entries or more (or the queue is
    #: paused): the dispatcher polls again after backlog_poll_ms.
    backlogged: bool
    run_at_ms: list[int]
    #: How long the call ran in Redis (us); 0 on the idle pass.
    busy_us: int = 0
    #: The queue is paused (pause.lua): nothing moved (backlogged is True too).
    paused: bool = False


def _decode_dispatch(reply: Any) -> DispatchResult:
    r = _int_list(reply)
    return DispatchResult(r[0], None if r[1] < 0 else r[1], r[2], bool(r[3]), r[5:], r[4],
                          r[3] == 2)  # fmt: skip


def dispatch(
    k: QueueKeys, *, now_ms: int | None, limit: int, max_backlog: int
) -> Call[DispatchResult]:
    return Call(
        "dispatch",
        [k.delayed, k.runs, k.ready, k.entries, k.stats, k.control],
        [_now(now_ms), limit, max_backlog],
        _decode_dispatch,
    )


def _stream_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def ack(
    k: QueueKeys,
    consumer: str,
    pairs: Sequence[tuple[str, str]],
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    trim_limit: int = 200,
    leases: Sequence[tuple[str, str]] = (),
) -> Call[list[int]]:
    """pairs: (entry_id, run_id); leases: (schedule_id, run_id) of the rule runs among them
    that hold an overlap lease, ended in the same call. Reply: a HoldCode per pair, in order.

    The pairs go to ack.lua in stream order: its ownership check reads the pending entries
    between the first and the last id once, and checks an id outside that range alone.
    """
    try:
        order = sorted(range(len(pairs)), key=lambda i: _stream_order(pairs[i][0]))
    except ValueError:  # not a stream id: ack.lua reports it
        order = list(range(len(pairs)))

    def decode(reply: Any) -> list[int]:
        codes = _int_list(reply)
        if len(codes) != len(order):
            return codes
        out = [0] * len(codes)
        for code, i in zip(codes, order, strict=True):
            out[i] = code
        return out

    head = [_now(now_ms), GROUP, consumer, dedupe_window_ms, trim_limit]
    args = head + _flatten(pairs[i] for i in order) + _flatten(leases)
    keys = [k.ready, k.runs, k.entries, k.done, k.stats, k.rule_waiting, k.delayed, k.wake]
    return Call("ack", keys + [k.lease(sid) for sid, _ in leases], args, decode)


def retry(
    k: QueueKeys,
    consumer: str,
    groups: Sequence[tuple[str, str, int, bytes]],
    *,
    now_ms: int | None,
) -> Call[list[int]]:
    """groups: (entry_id, run_id, delay_ms, next envelope). Reply: a HoldCode each."""
    return Call(
        "retry",
        [k.ready, k.runs, k.entries, k.delayed, k.stats, k.wake],
        [_now(now_ms), GROUP, consumer, *_flatten(groups)],
        _int_list,
    )


def release(
    k: QueueKeys, consumer: str, pairs: Sequence[tuple[str, str]], *, now_ms: int | None
) -> Call[list[int]]:
    """pairs: (entry_id, run_id). Reply: a HoldCode each: OK released, FENCED another
    consumer holds the entry, GONE no longer pending (or its run no longer live)."""
    return Call(
        "release",
        [k.ready, k.runs, k.entries, k.delayed, k.wake],
        [_now(now_ms), GROUP, consumer, *_flatten(pairs)],
        _int_list,
    )


def dead(
    k: QueueKeys,
    consumer: str,
    groups: Sequence[tuple[str, str, str, bytes]],
    *,
    now_ms: int | None,
    dedupe_window_ms: int = 0,
    leases: Sequence[tuple[str, str]] = (),
) -> Call[list[int]]:
    """groups: (entry_id, run_id, reason, envelope); leases: as ack's, ended in the same call.
    Reply: a HoldCode each."""
    keys = [k.ready, k.runs, k.entries, k.dead, k.stats, k.rule_waiting, k.delayed, k.wake,
            k.done, *[k.lease(sid) for sid, _ in leases]]  # fmt: skip
    tail = [dedupe_window_ms, *_flatten(leases)] if leases else []
    return Call("dead", keys, [_now(now_ms), GROUP, consumer, *_flatten(groups), *tail], _int_list)


@dataclass(frozen=True, slots=True)
class Claimed:
    entry_id: str
    run_id: str
    envelope: bytes
    deliveries: int


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    cursor: str
    claimed: list[Claimed]
    dead: int
    gone: int
    #: Entries of rule fires past max_deliveries, now this consumer's: dead-letter them (dead
    #: with the rule's lease), never run them. Empty in the older form (hand_over=False).
    over: list[Claimed] = field(default_factory=list)


def _claimed(flat: Any) -> list[Claimed]:
    return [
        Claimed(text(flat[i]), text(flat[i + 1]), bytes(flat[i + 2]), int(flat[i + 3]))
        for i in range(0, len(flat), 4)
    ]


def _decode_reclaim(reply: Any) -> ReclaimResult:
    cursor, flat, n_dead, n_gone, *over = reply
    return ReclaimResult(text(cursor), _claimed(flat), int(n_dead), int(n_gone),
                         _claimed(over[0]) if over else [])  # fmt: skip


def reclaim(
    k: QueueKeys,
    consumer: str,
    *,
    now_ms: int | None,
    min_idle_ms: int,
    count: int,
    max_deliveries: int,
    cursor: str = "0-0",
    hand_over: bool = True,
) -> Call[ReclaimResult]:
    """hand_over: a rule fire's entry past max_deliveries comes back in `over` for the caller
    to dead-letter with its lease (dead), instead of a dead letter here that leaves the lease
    to the rule's next fire."""
    args = [_now(now_ms), GROUP, consumer, min_idle_ms, count, max_deliveries, cursor]
    keys = [k.ready, k.runs, k.entries, k.dead, k.stats]
    return Call("reclaim", keys, [*args, 1 if hand_over else 0], _decode_reclaim)


def renew(k: QueueKeys, consumer: str, entry_ids: Sequence[str]) -> Call[list[int]]:
    """Reply: a HoldCode per entry id."""
    return Call("renew", [k.ready, k.stats], [GROUP, consumer, *entry_ids], _int_list)


def cancel(
    k: QueueKeys, run_id: str, *, now_ms: int | None = None, dedupe_window_ms: int = 0
) -> Call[int]:
    """Reply: a CancelCode. For a rule fire's id, the run's lease ends in the same call."""
    keys: list[str] = [k.delayed, k.runs]
    args: list[Any] = [run_id]
    sid = rule_of(run_id)
    if sid is not None:
        keys += [k.lease(sid), k.rule_waiting, k.wake, k.done]
        args += [sid, _now(now_ms), dedupe_window_ms]
    return Call("cancel", keys, args, int)


def status(k: QueueKeys, *, now_ms: int | None, max_leaves: int = 1000) -> Call[list[Any]]:
    """Reply: [sec, usec, size, due, head_ms or None, exact] of the delayed set."""
    return Call("status", [k.delayed], [_now(now_ms), max_leaves], list)


def migrate(k: QueueKeys, batch: int = MAX_BATCH) -> Call[tuple[int, int]]:
    """Move a batch of a key layout 2 delayed set into the tree. Reply: (moved, left)."""
    return Call("migrate", [k.delayed, k.runs, k.wake], [batch], lambda r: (int(r[0]), int(r[1])))


def replay(
    k: QueueKeys, groups: Sequence[tuple[str, str, bytes]], *, now_ms: int | None
) -> Call[list[int]]:
    """groups: (dead entry id, run_id, new envelope). Reply: a ReplayCode each."""
    return Call(
        "replay",
        [k.dead, k.runs, k.delayed, k.wake],
        [_now(now_ms), *_flatten(groups)],
        _int_list,
    )
