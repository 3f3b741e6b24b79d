"""The typed wrappers of the rules' scripts: schedule, unschedule, fire, unlease, backfill and
extend (split from zsched/store/scripts.py, which re-exports them, by concept: a rule's spec,
its ledger and its overlap lease)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zsched.errors import InvalidArgument
from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import text
from zsched.store.loader import Call
from zsched.store.replies import flatten as _flatten
from zsched.store.replies import int_list as _int_list
from zsched.store.replies import now_arg as _now


def schedule(
    k: QueueKeys,
    schedule_id: str,
    spec: bytes,
    next_ms: int | None,
    state: bytes = b"",
    catchup_head: int | None = None,
    expected: tuple[bytes, int | None, bytes] | None = None,
    triggers: bytes = b"",
) -> Call[int]:
    """Upsert a rule. Reply: a ScheduleCode: CREATED, UPDATED, UNCHANGED, or CHANGED when
    `expected` (spec, next fire, state as read; b"" / None = absent) no
    longer holds. `catchup_head`: with a state, its oldest waiting catch-up slot. `triggers`
    (with `expected`): the rule's trigger history to store with the spec (b"": keep it)."""
    args: list[Any] = [schedule_id, spec, -1 if next_ms is None else next_ms, state,
                       -1 if catchup_head is None else catchup_head]  # fmt: skip
    if expected is not None:
        exp_spec, exp_next, exp_state = expected
        args += [exp_spec, "" if exp_next is None else exp_next, exp_state, triggers]
    elif triggers:
        raise InvalidArgument("schedule: a trigger history is written only with `expected`")
    keys = [k.rules, k.rule_next, k.rule_state, k.rule_catchup, k.wake, k.rule_triggers]
    return Call("schedule", keys, args, int)


def unschedule(k: QueueKeys, schedule_id: str) -> Call[int]:
    """Reply: 1 removed, 0 no such rule."""
    return Call(
        "unschedule",
        [k.rules, k.rule_next, k.rule_state, k.rule_catchup, k.rule_waiting,
         k.ledger(schedule_id), k.lease(schedule_id), k.rule_triggers],
        [schedule_id],
        int,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class FireResult:
    ok: bool
    fired: int
    duplicates: int
    overlap_skipped: int
    queued: int


def _decode_fire(reply: Any) -> FireResult:
    r = _int_list(reply)
    return FireResult(bool(r[0]), r[1], r[2], r[3], r[4])


@dataclass(frozen=True, slots=True)
class FireArgs:
    """What a dispatcher read (for the compare-and-set) and what it wants written."""

    schedule_id: str
    expected_spec: bytes
    expected_next: int | None
    expected_state: bytes
    new_next: int | None
    new_state: bytes
    catchup_head: int | None
    overlap: str
    lease_ms: int
    #: (run_id, run_at_ms, slot_ms, envelope, outcome)
    fires: Sequence[tuple[str, int, int, bytes, str]]
    #: (slot_ms, outcome, reason, run_id, last_ms): last_ms > slot_ms records every slot of
    #: [slot_ms, last_ms] at once (ledger.skipped_range)
    records: Sequence[tuple[int, str, str, str, int]]


def fire(
    k: QueueKeys,
    a: FireArgs,
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    ledger_maxlen: int,
    ledger_max_age_ms: int,
) -> Call[FireResult]:
    sid = a.schedule_id
    return Call(
        "fire",
        [k.rules, k.rule_next, k.rule_state, k.rule_catchup, k.runs, k.delayed, k.done, k.stats,
         k.wake, k.rule_waiting, k.ledger(sid), k.lease(sid)],
        [_now(now_ms), sid, a.expected_spec, "" if a.expected_next is None else a.expected_next,
         a.expected_state, -1 if a.new_next is None else a.new_next, a.new_state,
         -1 if a.catchup_head is None else a.catchup_head, dedupe_window_ms, a.overlap,
         a.lease_ms, ledger_maxlen, ledger_max_age_ms, len(a.fires), *_flatten(a.fires),
         *_flatten(a.records)],
        _decode_fire,
    )  # fmt: skip


def unlease(
    k: QueueKeys, schedule_id: str, run_id: str, lease_ms: int, *, now_ms: int | None,
    dedupe_window_ms: int,
) -> Call[tuple[bool, str]]:  # fmt: skip
    """Reply: (released, run id of the waiting fire started now or ""; a waiting fire whose
    run is live, or done within the dedupe window, is dropped)."""
    return Call(
        "unlease",
        [k.lease(schedule_id), k.rule_waiting, k.runs, k.delayed, k.wake, k.done],
        [_now(now_ms), schedule_id, run_id, lease_ms, dedupe_window_ms],
        lambda r: (bool(int(r[0])), text(r[1])),
    )


def backfill(
    k: QueueKeys,
    schedule_id: str,
    slots: Sequence[tuple[str, int, bytes]],
    *,
    recorded: int,
    now_ms: int | None,
    dedupe_window_ms: int,
    ledger_maxlen: int,
) -> Call[list[int]]:
    """slots: (run_id, slot_ms, envelope), enqueued due now with a ledger record each;
    `recorded`: slots left out because the ledger shows them run. Reply: one code per slot
    (an EnqueueCode)."""
    return Call(
        "backfill",
        [k.delayed, k.runs, k.done, k.stats, k.wake, k.ledger(schedule_id)],
        [_now(now_ms), dedupe_window_ms, schedule_id, ledger_maxlen, recorded, *_flatten(slots)],
        _int_list,
    )


def extend(k: QueueKeys, schedule_id: str, run_id: str, ttl_ms: int) -> Call[bool]:
    """Keep a rule's overlap lease for its run while the run waits for a retry.
    Reply: True extended (its TTL), False not this run's lease (or no lease)."""
    return Call("extend", [k.lease(schedule_id), k.runs], [run_id, max(1, int(ttl_ms))],
                lambda r: bool(int(r)))  # fmt: skip
