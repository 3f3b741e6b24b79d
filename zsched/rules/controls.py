"""Run a recurring rule now (a manual fire), through fire.lua's compare-and-set.

A manual fire has its own run id, `<schedule_id>@manual:<instant>`, is recorded in the rule's
ledger with the outcome `manual`, and leaves the rule's slots, next fire and state as they
were. It respects the rule's overlap policy (skip: not started while a run holds the lease;
queue: waits for it) unless forced; a forced fire neither waits for nor takes the lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from zsched.clock import server_now_ms
from zsched.errors import RuleError
from zsched.protocol.envelope import Envelope
from zsched.rules import dst, ledger
from zsched.rules.ops import CAS_ATTEMPTS, load
from zsched.store import scripts as S

if TYPE_CHECKING:
    from zsched.context import QueueContext


class ManualOutcome(Enum):
    """What run_schedule_now did."""

    #: The run is enqueued, due now.
    STARTED = "started"
    #: Overlap skip: the rule's previous run still holds the lease; nothing enqueued.
    SKIPPED = "skipped"
    #: Overlap queue: it waits for the rule's running run to finish.
    QUEUED = "queued"
    #: A run with this id is already live or done (the same instant, twice).
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class ManualFire:
    """The answer of run_schedule_now."""

    schedule_id: str
    run_id: str
    outcome: ManualOutcome

    @property
    def started(self) -> bool:
        return self.outcome is ManualOutcome.STARTED

    def as_dict(self) -> dict[str, Any]:
        return {"schedule_id": self.schedule_id, "run_id": self.run_id,
                "outcome": self.outcome.value, "started": self.started}  # fmt: skip


def manual_run_id(schedule_id: str, now_ms: int) -> str:
    """`<schedule_id>@manual:<instant as UTC ISO-8601>` (routes with its rule's partition)."""
    return f"{schedule_id}@manual:{dst.iso_utc(now_ms)}"


def run_now(ctx: QueueContext, schedule_id: str, force: bool = False) -> ManualFire:
    """Fire the rule once now; see the module docstring."""
    for _ in range(CAS_ATTEMPTS):
        got = _once(ctx, schedule_id, force)
        if got is not None:
            return got
    raise RuleError(f"schedule {schedule_id} kept changing while being run now; try again")


def _once(ctx: QueueContext, sid: str, force: bool) -> ManualFire | None:
    spec, state, raw_spec, raw_state, nxt = load(ctx, sid)
    now = server_now_ms(ctx.clock, ctx.redis)
    rid = manual_run_id(sid, now)
    overlap = "allow" if force else str(spec.overlap)
    lease_ms = spec.lease_ms if overlap != "allow" else None
    env = Envelope(rid, spec.task, spec.payload, now, now, now, schedule_id=sid, lease_ms=lease_ms)
    # The same next fire, state and catch-up backlog as read: the rule's slots do not move.
    args = S.FireArgs(sid, raw_spec, nxt, raw_state, nxt, raw_state,
                      None if spec.paused else state.catchup_head, overlap, spec.lease_ms,
                      [(rid, now, now, env.encode(), ledger.Outcome.MANUAL)], [])  # fmt: skip
    r = ctx.scripts.run(ledger.fire(ctx.keys, args, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.settings.dedupe_window_ms, trim=False))  # fmt: skip
    if not r.ok:
        return None
    if r.fired:
        outcome = ManualOutcome.STARTED
    elif r.queued:
        outcome = ManualOutcome.QUEUED
    elif r.overlap_skipped:
        outcome = ManualOutcome.SKIPPED
    else:
        outcome = ManualOutcome.DUPLICATE
    return ManualFire(sid, rid, outcome)
