"""The slot plan of a recurring rule, pure: which slots fire now, which are coalesced or
skipped and why (misfire policy, catch-up budget, DST gaps), and the arguments of the `fire`
call that applies it (zsched/dispatch/firer.py sends it; the simulator runs the same code).
The `fire` script then decides overlap and duplicates with a compare-and-set.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo

from zsched.clock import ms_to_datetime
from zsched.protocol.envelope import Envelope
from zsched.rules import ledger
from zsched.rules.policies import Misfire, Overlap
from zsched.rules.spec import Spec, State
from zsched.rules.triggers import Cron, slot_run_id, trigger_from_dict
from zsched.store import scripts as S

#: Slots examined per rule per pass; a longer outage is counted without listing every slot.
MAX_SLOTS_PER_PASS = 1000
#: Ledger records one fire call carries at most (lua/fire.lua's bound).
MAX_RECORDS_PER_CALL = 1000
#: How soon a dispatcher comes back to drain catch-up fires the budget left for later.
CATCH_UP_PAUSE_MS = 20
#: How soon a dispatcher looks again at replays that wait for a run of their rule to end
#: (unlease publishes on `wake` when it does; this bounds the wait if nobody publishes).
CATCH_UP_BLOCKED_MS = 1000


@dataclass
class Plan:
    """What one rule does at one instant."""

    fires: list[tuple[int, int, str]] = field(default_factory=list)  # (slot, run_at, outcome)
    records: list[ledger.Record] = field(default_factory=list)
    new_next: int | None = None
    state: State = field(default_factory=State)
    missed: int = 0
    budget_used: int = 0
    #: `coalesce` over several passes: the slot named for the missed ones (State's field).
    coalesce_into_ms: int | None = None


def jitter_ms(spec: Spec, slot_ms: int, base_ms: int | None = None) -> int:
    """A deterministic spread in [0, jitter): the same slot always gets the same delay, cut so
    the fire (due at `base_ms` + delay; `base_ms` the slot by default) comes before the rule's
    next slot: jitter never reorders fires, also where a DST change shortens a gap."""
    if not spec.jitter_ms:
        return 0
    spread = zlib.crc32(f"{spec.schedule_id}@{slot_ms}".encode()) % spec.jitter_ms
    room = spec.trigger.next_after_ms(slot_ms) - (slot_ms if base_ms is None else base_ms) - 1
    return max(0, min(spread, room))


def due_slots(spec: Spec, next_ms: int, now_ms: int, limit: int = MAX_SLOTS_PER_PASS
              ) -> tuple[list[int], int | None]:  # fmt: skip
    """Slots from `next_ms` up to `now_ms` (at most `limit`), and the first slot after them."""
    slots: list[int] = []
    slot: int | None = next_ms
    while slot is not None and slot <= now_ms and len(slots) < limit:
        if spec.end_ms is not None and slot > spec.end_ms:
            return slots, None
        slots.append(slot)
        slot = spec.first_slot_after(slot)
    if slot is not None and slot <= now_ms:
        # Too many to list in one pass: the next pass goes on from here.
        return slots, slot
    return slots, slot


def plan(spec: Spec, state: State, next_ms: int | None, now_ms: int, budget: int,
         lease_free: bool = True) -> Plan:  # fmt: skip
    """Decide the fires and outcomes of one rule at `now_ms`. Pure: no I/O, no clock.
    `next_ms` is the rule's stored next fire if it is due, else None (catch-up only).
    `lease_free`: no live run holds the rule's overlap lease (read by the caller)."""
    limit = MAX_SLOTS_PER_PASS
    while True:
        p = _plan(spec, state, next_ms, now_ms, budget, lease_free, limit)
        over = len(p.records) - MAX_RECORDS_PER_CALL
        if over <= 0 or limit == 1:
            return p
        # Records beside the slots listed (a backlog cut by an edit that lowered max_catch_up
        # during an outage, DST gaps, duplicates) would pass fire.lua's bound, and a refused
        # call would stall the rule: list fewer, the next pass goes on. Outcomes do not
        # depend on how an outage is split into passes (the newest max_catch_up are kept).
        limit = max(1, limit - over)


def _plan(spec: Spec, state: State, next_ms: int | None, now_ms: int, budget: int,
          lease_free: bool, limit: int) -> Plan:  # fmt: skip
    slots, new_next = (due_slots(spec, next_ms, now_ms, limit) if next_ms is not None
                       else ([], None))  # fmt: skip
    # An outage longer than one pass lists stays due (new_next <= now): the next pass goes on.
    p = Plan(new_next=new_next)
    on_time = [s for s in slots if now_ms - s <= spec.misfire_grace_ms]
    late = [s for s in slots if now_ms - s > spec.misfire_grace_ms]
    p.missed = len(late)
    sid = spec.schedule_id
    backlog = list(state.backlog)
    if late:
        last_pass = new_next is None or new_next > now_ms
        backlog = _misfire(spec, p, state, backlog, on_time, late, now_ms, last_pass)
    for s in on_time:
        p.fires.append((s, s + jitter_ms(spec, s), ledger.Outcome.RAN))
    seen = {*backlog, *(f[0] for f in p.fires)}
    backlog = _backfilled_duplicates(spec, p, set(state.backfilled), backlog)
    # Catch-up replays drain under the budget, after the on-time fires. Under overlap skip or
    # queue they run one after another: one at a time, only while no run holds the lease,
    # so no replay is ever skipped or queued because of another (docs/policies.md). None
    # starts while missed slots wait for the next pass: the newest max_catch_up of the whole
    # outage are kept, and the on-time fire that ends it goes first.
    more = new_next is not None and new_next <= now_ms
    take = [] if more else backlog[: max(0, _replay_room(spec, p, budget, lease_free))]
    for s in take:
        p.fires.append((s, now_ms, ledger.REPLAY))
    p.budget_used = len(take)
    backlog = backlog[len(take) :]
    gaps, gap_checked = dst_gap_skips(spec, state, next_ms, now_ms)
    p.records += [ledger.skipped(sid, g, "dst_gap") for g in gaps]
    fired_slots = [f[0] for f in p.fires]
    # Backfilled slots handled in this pass (recorded duplicate, or by the policy) go.
    kept = [s for s in state.backfilled if s not in seen and not (slots and s <= slots[-1])]
    p.state = replace(
        state,
        last_slot_ms=max([*fired_slots, state.last_slot_ms or 0]) or state.last_slot_ms,
        last_fire_ms=now_ms if fired_slots else state.last_fire_ms,
        missed=state.missed + p.missed,
        fired=state.fired + len(p.fires),
        backlog=backlog,
        gap_checked_ms=gap_checked,
        backfilled=kept,
        # Kept only between the passes of one outage (a pass that only drains keeps it).
        coalesce_into_ms=p.coalesce_into_ms if next_ms is not None else state.coalesce_into_ms,
    )
    return p


def _backfilled_duplicates(spec: Spec, p: Plan, backfilled: set[int], backlog: list[int]
                           ) -> list[int]:  # fmt: skip
    """A slot a backfill already ran is not fired again by its rule, however long after:
    its fire, or its replay, is recorded `duplicate` (fire.lua sees a done run only within
    the dedupe window). Returns the backlog without those replays."""
    if not backfilled:
        return backlog
    dups = [f[0] for f in p.fires if f[0] in backfilled] + [s for s in backlog if s in backfilled]
    p.records += [ledger.duplicate(spec.schedule_id, s) for s in dups]
    p.fires = [f for f in p.fires if f[0] not in backfilled]
    return [s for s in backlog if s not in backfilled]


def _replay_room(spec: Spec, p: Plan, budget: int, lease_free: bool) -> int:
    """How many catch-up replays may start in this pass."""
    if spec.overlap is Overlap.ALLOW:
        return budget
    return min(budget, 1) if lease_free and not p.fires else 0


def _misfire(spec: Spec, p: Plan, state: State, backlog: list[int], on_time: list[int],
             late: list[int], now_ms: int, last_pass: bool) -> list[int]:  # fmt: skip
    """Apply the rule's misfire policy to its `late` slots: records and fires go into `p`; the
    catch-up backlog (capped at max_catch_up) is returned. `last_pass`: no more missed slots
    wait for the next pass (an outage of over MAX_SLOTS_PER_PASS slots takes several)."""
    sid = spec.schedule_id
    if spec.misfire is Misfire.CATCH_UP:
        backlog += late
        if len(backlog) > spec.max_catch_up:
            cut = len(backlog) - spec.max_catch_up
            for s in backlog[:cut]:
                p.records.append(ledger.skipped(sid, s, "catch_up_cap"))
            backlog = backlog[cut:]
    elif spec.misfire is Misfire.COALESCE:
        _coalesce(spec, p, state, on_time, late, now_ms, last_pass)
    else:
        for s in late:
            p.records.append(ledger.skipped(sid, s, "grace_passed"))
    return backlog


def _coalesce(spec: Spec, p: Plan, state: State, on_time: list[int], late: list[int],
              now_ms: int, last_pass: bool) -> None:  # fmt: skip
    """One run stands for all missed slots: the on-time fire, else the newest missed slot.
    An outage listed over several passes names that slot's run from its first pass on
    (kept in the state, so a clock that moves on between passes changes no name)."""
    named = state.coalesce_into_ms
    if not last_pass:  # the target is listed by a later pass
        target = named if named is not None else _coalesce_target(spec, late[-1], now_ms)
        p.coalesce_into_ms = target
    else:
        slots = {*on_time, *late}
        target = named if named in slots else (on_time[0] if on_time else late[-1])
    into = slot_run_id(spec.schedule_id, target)
    for s in late:
        if s != target:
            p.records.append(ledger.coalesced(s, f"into {into}", into))
    if last_pass and target not in on_time:
        p.fires.append((target, now_ms + jitter_ms(spec, target, now_ms),
                        ledger.Outcome.RAN_LATE))  # fmt: skip


def _coalesce_target(spec: Spec, slot_ms: int, now_ms: int) -> int:
    """The slot the last pass at `now_ms` would run for all missed ones, without listing
    them: the first on-time slot, else the newest slot up to `now_ms` (found by bisection
    from `slot_ms`, a slot before it: about 40 trigger steps for any outage)."""
    first_on_time = spec.first_slot_after(now_ms - spec.misfire_grace_ms - 1)
    if first_on_time is not None and first_on_time <= now_ms:
        return first_on_time
    lo, hi = slot_ms, now_ms  # the newest slot is in (lo, hi]: the first x with none in (x, now]
    while lo < hi:
        mid = (lo + hi) // 2
        nxt = spec.first_slot_after(mid)
        if nxt is None or nxt > now_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


_OFFSET_STEP_MS = 7 * 86_400_000


def dst_gap_skips(spec: Spec, state: State, next_ms: int | None, now_ms: int
                  ) -> tuple[list[int], int | None]:  # fmt: skip
    """Fires a `dst_gap="skip"` cron rule dropped because their wall time did not exist.

    They are the fires the same rule would make with `dst_gap="shift"` (moved to the end of the
    gap) that are not fires of the rule itself; each is recorded at that instant, so the
    ledger says why the day had no run. A wildcard rule's dropped slots merge into a real
    slot at the gap's end and are not listed: they simply do not exist (docs/policies.md).
    """
    trig = spec.trigger
    if not isinstance(trig, Cron) or trig.dst_gap != "skip" or next_ms is None:
        return [], state.gap_checked_ms
    # Never checked yet: from the rule's creation, so a gap before its first fire is listed.
    first = state.created_ms if state.created_ms is not None else next_ms
    lo = state.gap_checked_ms if state.gap_checked_ms is not None else first - 1
    lo = max(lo, (state.created_ms or lo) - 1)
    if now_ms <= lo:
        return [], state.gap_checked_ms
    zone = ZoneInfo(trig.tz)

    def offset(ms: int) -> object:
        return zone.utcoffset(ms_to_datetime(ms).astimezone(zone))

    # No transition in between: the common case, cheap. Sampled weekly, not only at the ends:
    # a spring and an autumn transition cancel out over a long window (a yearly rule, an
    # outage); two transitions less than a week apart would still be missed.
    samples = [*range(lo, now_ms, _OFFSET_STEP_MS), now_ms]
    if len({offset(t) for t in samples}) == 1:
        return [], now_ms
    # From the stored form: a rule stored before the cron syntax table is read as it was.
    shifted = trigger_from_dict({**trig.to_dict(), "dst_gap": "shift"})
    own = set(trig.slots_between(lo, now_ms, MAX_SLOTS_PER_PASS))
    gaps = [s for s in shifted.slots_between(lo, now_ms, MAX_SLOTS_PER_PASS) if s not in own]
    return gaps, now_ms


def fire_args(spec: Spec, raw_spec: bytes, raw_state: bytes, next_ms: int | None,
              new_next: int | None, p: Plan, now_ms: int) -> S.FireArgs:  # fmt: skip
    """The fire script's arguments: what was read (`*_raw`, `next_ms`) and what to write."""
    sid = spec.schedule_id
    lease = spec.lease_ms if spec.overlap is not Overlap.ALLOW else None
    fires = []
    for slot, run_at, outcome in p.fires:
        rid = slot_run_id(sid, slot)
        env = Envelope(rid, spec.task, spec.payload, run_at, slot, now_ms, schedule_id=sid,
                       lease_ms=lease).encode()  # fmt: skip
        fires.append((rid, run_at, slot, env, outcome))
    return S.FireArgs(
        schedule_id=sid,
        expected_spec=raw_spec,
        expected_next=next_ms,
        expected_state=raw_state,
        new_next=new_next,
        new_state=p.state.encode(),
        catchup_head=p.state.catchup_head,
        overlap=str(spec.overlap),
        lease_ms=spec.lease_ms,
        fires=fires,
        records=p.records,
    )
