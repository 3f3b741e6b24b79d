"""The fire ledger of a rule: one outcome per slot, in a capped stream (`QueueKeys.ledger`).

Only two scripts write it, fire.lua and backfill.lua, and only the two calls here ask them to:
this module is the ledger's one home in Python (its bounds, its outcome names, the records
that Python decides, and the reader). docs/protocol.md lists the entry's fields: slot_ms,
outcome, reason, run_id, at_ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from zsched.protocol.keys import QueueKeys
from zsched.rules.triggers import slot_run_id
from zsched.store import scripts as S

#: Entries kept per rule (XADD MAXLEN ~).
LEDGER_MAXLEN = 10_000
#: Entries older than this are trimmed when a dispatcher fires the rule (30 days).
LEDGER_MAX_AGE_MS = 30 * 24 * 3600 * 1000


class Outcome(StrEnum):
    """A slot's outcome, as the ledger's `outcome` field spells it (a str: the wire value)."""

    #: Fired within its misfire grace.
    RAN = "ran"
    #: Fired after its grace: a coalesced run, or a catch-up replay.
    RAN_LATE = "ran_late"
    #: No run; `reason` says why (grace_passed, catch_up_cap, overlap, paused, dst_gap).
    SKIPPED = "skipped"
    #: Folded into another slot's run (`reason` and `run_id` name it).
    COALESCED = "coalesced"
    #: The slot's run id was already live or recently done: nothing new was enqueued.
    DUPLICATE = "duplicate"
    #: Enqueued by a backfill.
    BACKFILLED = "backfilled"
    #: A manual fire (run_schedule_now), not a slot of the trigger.
    MANUAL = "manual"


#: The fire outcome of a catch-up replay: recorded `ran_late`; fire.lua refuses the whole call
#: (compare-and-set) if a run holds the rule's overlap lease when a replay would start.
REPLAY = "replay"
#: Outcomes whose slot has had its run: a backfill does not enqueue these slots again.
HAS_RUN = frozenset({Outcome.RAN, Outcome.RAN_LATE, Outcome.BACKFILLED})

#: A ledger entry decided in Python and written by fire.lua: (slot_ms, outcome, reason, run_id,
#: last_ms); last_ms == slot_ms for one slot, later for a range (`skipped_range`: run_id is
#: then its number of slots).
Record = tuple[int, str, str, str, int]


def skipped(schedule_id: str, slot_ms: int, reason: str) -> Record:
    """The record of a slot that gets no run, and why."""
    return (slot_ms, Outcome.SKIPPED, reason, slot_run_id(schedule_id, slot_ms), slot_ms)


def skipped_range(first_ms: int, last_ms: int, reason: str, slots: int) -> Record:
    """One record for every slot in [first_ms, last_ms] that gets no run (a pause too long to
    list its slots one by one: a year of a 1 s rule is one entry, not 31.5 million). `slots`:
    how many they are (rules.slot_count): fire.lua counts them so in `stats`; it passes in
    the run id's place (a range has no run id; the entry's run_id stays empty)."""
    return (first_ms, Outcome.SKIPPED, reason, str(slots), last_ms)


#: The reason of a `duplicate` slot (fire.lua writes the same for a run id live or done).
DUPLICATE_REASON = "run id already live or done"


def duplicate(schedule_id: str, slot_ms: int) -> Record:
    """The record of a slot a backfill already ran: its rule does not fire it again."""
    return (slot_ms, Outcome.DUPLICATE, DUPLICATE_REASON, slot_run_id(schedule_id, slot_ms),
            slot_ms)  # fmt: skip


def coalesced(slot_ms: int, reason: str, into: str) -> Record:
    """The record of a slot folded into the run `into` ("" when a later pass picks it)."""
    return (slot_ms, Outcome.COALESCED, reason, into, slot_ms)


def fire(
    k: QueueKeys, args: S.FireArgs, *, now_ms: int | None, dedupe_window_ms: int, trim: bool
) -> S.Call[S.FireResult]:
    """The fire call, with the ledger's bounds; `trim`: drop entries older than
    LEDGER_MAX_AGE_MS too (a dispatcher's pass; a rule operation leaves that to it)."""
    return S.fire(k, args, now_ms=now_ms, dedupe_window_ms=dedupe_window_ms,
                  ledger_maxlen=LEDGER_MAXLEN,
                  ledger_max_age_ms=LEDGER_MAX_AGE_MS if trim else 0)  # fmt: skip


def backfill(k: QueueKeys, schedule_id: str, slots: Sequence[tuple[str, int, bytes]], *,
             recorded: int, now_ms: int | None, dedupe_window_ms: int) -> S.Call[list[int]]:  # fmt: skip
    """The backfill call, with the ledger's bound (see scripts.backfill)."""
    return S.backfill(k, schedule_id, slots, recorded=recorded, now_ms=now_ms,
                      dedupe_window_ms=dedupe_window_ms, ledger_maxlen=LEDGER_MAXLEN)  # fmt: skip


def rows(entries: list[Any]) -> list[dict[str, Any]]:
    """Decoded XRANGE/XREVRANGE entries: slot_ms, outcome, reason, run_id, at_ms, last_ms each
    (last_ms: the last slot the entry records; slot_ms but for a range)."""
    out = []
    for _, f in entries:
        d = {k.decode(): v.decode() for k, v in f.items()}
        slot = int(d["slot_ms"])
        out.append({"slot_ms": slot, "outcome": d["outcome"],
                    "reason": d.get("reason", ""), "run_id": d.get("run_id", ""),
                    "at_ms": int(d.get("at_ms", 0)), "last_ms": int(d.get("last_ms", slot))})  # fmt: skip
    return out


def history(redis: Any, k: QueueKeys, schedule_id: str, count: int = 100) -> list[dict[str, Any]]:
    """The rule's ledger, newest first (a sync client; AsyncApp awaits `rows` of the same read)."""
    return rows(redis.xrevrange(k.ledger(schedule_id), "+", "-", count=count))


def last_outcome(entries: list[Any]) -> str | None:
    """The outcome of the newest entry of an XREVRANGE ... COUNT 1 reply (None: no entry)."""
    return entries[0][1].get(b"outcome", b"").decode() if entries else None
