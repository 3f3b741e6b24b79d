"""Operations on a queue's recurring rules: upsert, pause, resume, remove, backfill, list,
and syncing the rules declared in code. App methods delegate here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zsched.clock import ms_to_datetime, server_now_ms
from zsched.errors import RuleError, ScheduleNotFound, UnreadableRule
from zsched.protocol.envelope import Envelope
from zsched.protocol.replies import EnqueueCode, ScheduleCode, ScheduleResult
from zsched.rules import ledger, past_triggers
from zsched.rules.slot_count import count_between
from zsched.rules.spec import ScheduleInfo, Spec, State, build_spec, decode_rule, decode_state
from zsched.rules.spec import _instant_ms as instant_ms
from zsched.rules.triggers import slot_run_id
from zsched.store import scripts as S

if TYPE_CHECKING:
    from zsched.context import QueueContext

log = logging.getLogger(__name__)
#: Slots listed one by one when a paused rule resumes; a longer pause is one range record.
MAX_PAUSED_RECORDS = 1000
#: Read-then-write attempts of an edit or a pause racing a dispatcher that fires the rule.
CAS_ATTEMPTS = 5
#: Longest pause note (characters).
MAX_NOTE = 500
#: Longest name of who paused a rule (characters; no ":" so the ledger's reason parses).
MAX_BY = 100
#: Most slots one backfill enqueues; a longer range is refused, not cut (docs/policies.md).
MAX_BACKFILL_SLOTS = 10_000


def _read(ctx: QueueContext, sid: str
          ) -> tuple[bytes | None, bytes | None, int | None, bytes | None]:  # fmt: skip
    """The rule's spec, state, next fire and trigger history, as stored."""
    pipe = ctx.redis.pipeline(transaction=False)
    pipe.hget(ctx.keys.rules, sid)
    pipe.hget(ctx.keys.rule_state, sid)
    pipe.zscore(ctx.keys.rule_next, sid)
    pipe.hget(ctx.keys.rule_triggers, sid)
    raw_spec, raw_state, nxt, raw_triggers = pipe.execute()
    return raw_spec, raw_state, None if nxt is None else int(nxt), raw_triggers


def load(ctx: QueueContext, sid: str) -> tuple[Spec, State, bytes, bytes, int | None]:
    raw_spec, raw_state, nxt, _ = _read(ctx, sid)
    if raw_spec is None:
        raise ScheduleNotFound(f"no schedule {sid!r} in queue {ctx.queue!r}")
    spec, state = decode_rule(sid, raw_spec, raw_state)
    return spec, state, raw_spec, raw_state or b"", nxt


def upsert(ctx: QueueContext, schedule_id: str, task_name: str, **options: Any) -> ScheduleResult:
    """Create or edit a rule: CREATED, UPDATED or UNCHANGED."""
    spec = build_spec(schedule_id, task_name, **options)
    code = _with_cas(schedule_id, lambda: _upsert_once(ctx, spec, "paused" in options))
    return ScheduleResult.of(code)


def _with_cas(schedule_id: str, attempt: Callable[[], int]) -> int:
    """Run a read-then-write of a rule until no dispatcher changed the rule in between."""
    for _ in range(CAS_ATTEMPTS):
        code = attempt()
        if code != ScheduleCode.CHANGED:
            return code
    raise RuleError(f"schedule {schedule_id} kept changing while being written; try again")


def _upsert_once(ctx: QueueContext, spec: Spec, paused_given: bool) -> int:
    schedule_id = spec.schedule_id
    now = server_now_ms(ctx.clock, ctx.redis)
    raw_old, raw_state, old_next, raw_triggers = _read(ctx, schedule_id)
    new_raw = spec.encode()
    expected = (raw_old or b"", old_next, raw_state or b"")
    if raw_old is None:
        state = State(created_ms=now, updated_ms=now, slots_from_ms=now,
                      paused_at_ms=now if spec.paused else None)  # fmt: skip
        nxt = None if spec.paused else spec.first_slot_after(now - 1)
        return ctx.scripts.run(
            S.schedule(ctx.keys, schedule_id, new_raw, nxt, state.encode(), expected=expected)
        )
    if raw_old == new_raw:
        return ScheduleCode.UNCHANGED
    old = _editable(schedule_id, raw_old, raw_state)
    if not paused_given and old.paused:
        # An edit that does not mention pausing keeps a pause made with pause_schedule (a
        # declared rule synced at every dispatcher start, an ctx that upserts at boot).
        spec = replace(spec, paused=True)
        new_raw = spec.encode()
        if raw_old == new_raw:
            return ScheduleCode.UNCHANGED
    if old.paused != spec.paused:
        raise RuleError(f"schedule {schedule_id}: use pause_schedule/resume_schedule to pause")
    # Catch-up replays still waiting stay (replayed under the new spec): none is lost.
    raw_state = _record_pause_so_far(ctx, old, spec, raw_old, raw_state or b"", now)
    if raw_state is None:
        return ScheduleCode.CHANGED
    expected = (raw_old, old_next, raw_state)
    state = _edited_state(old, spec, decode_state(raw_state), now)
    triggers = b""
    if _slots_differ(old, spec):
        # The old trigger's slots up to the edit stay audited (zsched/rules/past_triggers.py).
        span = past_triggers.replaced(old, decode_state(raw_state), old_next, now)
        triggers = past_triggers.appended(raw_triggers, span)
    if spec.paused:
        nxt = None
    elif old_next is not None and old_next <= now:
        nxt = old_next  # a slot already due fires under the new spec; none is lost
    else:
        nxt = spec.first_slot_after(now)
    head = None if spec.paused else state.catchup_head
    return ctx.scripts.run(S.schedule(ctx.keys, schedule_id, new_raw, nxt, state.encode(),
                                      catchup_head=head, expected=expected,
                                      triggers=triggers))  # fmt: skip


def _editable(schedule_id: str, raw: bytes, raw_state: bytes | None) -> Spec:
    # UnreadableRule: not overwritten, a newer zsched may have written it.
    return decode_rule(schedule_id, raw, raw_state, "edited")[0]


def _edited_state(old: Spec, new: Spec, state: State, now: int) -> State:
    state = replace(state, updated_ms=now)
    if old.trigger != new.trigger:
        # DST gaps are judged by the trigger in force when they happen: the new one only
        # from now (else it could record a gap where the old one had a slot: two outcomes).
        state = replace(state, gap_checked_ms=now)
    if _slots_differ(old, new):
        state = replace(state, slots_from_ms=now)  # the audit expects the new slots from now
    return state


def _record_pause_so_far(ctx: QueueContext, old: Spec, new: Spec, raw_old: bytes,
                         raw_state: bytes, now: int) -> bytes | None:  # fmt: skip
    """An edit of a paused rule's trigger: record the old trigger's slots of the pause up to
    `now` (`skipped: paused`) and move the pause's start past them, so the resume records
    the new trigger's from here (else the new one's slots before the old one's next slot
    got no outcome; the audit, looking past the last write, found it). Returns the stored
    state then (as it was when nothing is to record), or None if the rule changed meanwhile."""
    state = decode_state(raw_state)
    if not new.paused or old.trigger == new.trigger or state.paused_at_ms is None:
        return raw_state
    records = paused_records(old, state, state.paused_at_ms, now)
    moved = replace(state, paused_at_ms=now + 1).encode()
    args = S.FireArgs(old.schedule_id, raw_old, None, raw_state, None, moved, None,
                      str(old.overlap), old.lease_ms, [], records)  # fmt: skip
    r = ctx.scripts.run(ledger.fire(ctx.keys, args, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.settings.dedupe_window_ms, trim=False))  # fmt: skip
    return moved if r.ok else None


def _slots_differ(old: Spec, new: Spec) -> bool:
    """Whether an edit changes which instants are the rule's slots."""
    return (old.trigger, old.start_ms, old.end_ms) != (new.trigger, new.start_ms, new.end_ms)


def remove(ctx: QueueContext, schedule_id: str) -> bool:
    return ctx.scripts.run(S.unschedule(ctx.keys, schedule_id)) == 1


def pause(
    ctx: QueueContext, schedule_id: str, note: str | None = None, by: str | None = None
) -> bool:
    """Stop firing; slots until resume are recorded as skipped (paused, with the note and who
    paused). False if paused. Catch-up replays still waiting are kept, and replayed after
    resume."""
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
        raise RuleError(
            f"pause note of {schedule_id} must be text of at most {MAX_NOTE} characters"
        )
    if by is not None and (not isinstance(by, str) or not _plain_name(by)):
        raise RuleError(f"who paused {schedule_id} (by=) must be a name of at most {MAX_BY} "
                        "characters, without ':' or control characters")  # fmt: skip
    code = _with_cas(schedule_id, lambda: _pause_once(ctx, schedule_id, note or None, by or None))
    return code == ScheduleCode.UPDATED


def _plain_name(by: str) -> bool:
    return len(by) <= MAX_BY and ":" not in by and all(c.isprintable() for c in by)


def paused_reason(note: str | None, by: str | None) -> str:
    """The ledger reason of a slot skipped while paused: `paused[ by <who>][: <note>]`."""
    return "paused" + (f" by {by}" if by else "") + (f": {note}" if note else "")


def _pause_once(ctx: QueueContext, schedule_id: str, note: str | None, by: str | None) -> int:
    spec, state, raw_spec, raw_state, nxt = load(ctx, schedule_id)
    if spec.paused:
        return ScheduleCode.UNCHANGED
    now = server_now_ms(ctx.clock, ctx.redis)
    since = nxt if nxt is not None else now  # the first slot not handled yet
    new_state = replace(state, paused_at_ms=since, updated_ms=now, paused_ms=now, pause_note=note,
                        paused_by=by)  # fmt: skip
    paused = replace(spec, paused=True)
    code = ctx.scripts.run(S.schedule(ctx.keys, schedule_id, paused.encode(), None,
                                      new_state.encode(),
                                      expected=(raw_spec, nxt, raw_state)))  # fmt: skip
    if code == ScheduleCode.UPDATED and nxt is not None and nxt <= now \
            and spec.first_slot_after(nxt - 1) != nxt:  # fmt: skip
        _record_kept_slot(ctx, paused, new_state, nxt)
    return code


def _record_kept_slot(ctx: QueueContext, spec: Spec, state: State, slot: int) -> None:
    """A paused rule's stored next fire that an edit during an outage kept from the old
    trigger (due, not a slot of the current one): record it `skipped: paused` now and start
    the pause after it, since the resume lists the current trigger's slots only (else it got
    no outcome; docs/policies.md, an edit during an outage). A second call after the pause,
    compare-and-set on it, as an edit of a paused rule records the pause so far."""
    moved = replace(state, paused_at_ms=slot + 1)
    records = [ledger.skipped(spec.schedule_id, slot, paused_reason(state.pause_note,
                                                                    state.paused_by))]  # fmt: skip
    args = S.FireArgs(spec.schedule_id, spec.encode(), None, state.encode(), None, moved.encode(),
                      None, str(spec.overlap), spec.lease_ms, [], records)  # fmt: skip
    r = ctx.scripts.run(ledger.fire(ctx.keys, args, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.settings.dedupe_window_ms, trim=False))  # fmt: skip
    if not r.ok:  # resumed, edited or removed in the instant between: nothing to undo
        log.warning("schedule %s changed while its pause recorded slot %d; the slot may lack an "
                    "outcome (zsched schedules audit reports it)", spec.schedule_id, slot)  # fmt: skip


def resume(ctx: QueueContext, schedule_id: str) -> bool:
    """Fire again from now on; the slots missed while paused get the outcome skipped/paused."""
    spec, state, _, raw_state, _ = load(ctx, schedule_id)
    if not spec.paused:
        return False
    now = server_now_ms(ctx.clock, ctx.redis)
    live = replace(spec, paused=False)
    raw_live = live.encode()
    ctx.scripts.run(S.schedule(ctx.keys, schedule_id, raw_live, None))  # still inactive
    since = state.paused_at_ms if state.paused_at_ms is not None else now
    records = paused_records(live, state, since, now)
    # The schedule call kept the stored state, so what `load` read is still the CAS token.
    new_state = replace(state, paused_at_ms=None, updated_ms=now, paused_ms=None, pause_note=None,
                        paused_by=None)  # fmt: skip
    args = S.FireArgs(
        schedule_id, raw_live, None, raw_state, live.first_slot_after(now),
        new_state.encode(), state.catchup_head,  # replays a pause kept
        str(live.overlap), live.lease_ms, [], records,
    )  # fmt: skip
    r = ctx.scripts.run(ledger.fire(ctx.keys, args, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.settings.dedupe_window_ms, trim=False))  # fmt: skip
    if not r.ok:
        raise RuleError(f"schedule {schedule_id} changed while resuming; try again")
    return True


def paused_records(spec: Spec, state: State, since: int, now: int) -> list[ledger.Record]:
    """The `skipped: paused` records of the slots in [since, now]: one each, or one range
    record when there are more than MAX_PAUSED_RECORDS (bounded: one fire call either way)."""
    lo = since - 1 if spec.start_ms is None else max(since, spec.start_ms) - 1
    hi = now if spec.end_ms is None else min(now, spec.end_ms)
    slots = spec.trigger.slots_between(lo, hi, MAX_PAUSED_RECORDS + 1)
    why = paused_reason(state.pause_note, state.paused_by)
    if len(slots) > MAX_PAUSED_RECORDS:
        return [ledger.skipped_range(slots[0], hi, why, count_between(spec.trigger, lo, hi))]
    return [ledger.skipped(spec.schedule_id, s, why) for s in slots if s <= hi]


def backfill(
    ctx: QueueContext, schedule_id: str, start: datetime | float, end: datetime | float
) -> int:
    """Enqueue the rule's slots in [start, end] with their usual run ids, due now. Slots the
    ledger shows as run, and run ids still live or recently done, are not enqueued again.
    Returns how many runs were added. A range of more than MAX_BACKFILL_SLOTS slots is a
    RuleError, and nothing is enqueued."""
    spec, _, _, _, _ = load(ctx, schedule_id)
    lo, hi = instant_ms(start, "start"), instant_ms(end, "end")
    assert lo is not None and hi is not None
    if hi < lo:
        raise RuleError(f"backfill of {schedule_id}: end is before start")
    slots = spec.trigger.slots_between(lo - 1, hi, MAX_BACKFILL_SLOTS + 1)
    if len(slots) > MAX_BACKFILL_SLOTS:
        # Refused whole: a silent cut would leave the newest slots undone, unsaid.
        last = ms_to_datetime(slots[MAX_BACKFILL_SLOTS - 1]).isoformat()
        raise RuleError(f"backfill of {schedule_id}: the range holds more than "
                        f"{MAX_BACKFILL_SLOTS:,} slots (the {MAX_BACKFILL_SLOTS:,}th is at "
                        f"{last}); backfill it in parts of at most {MAX_BACKFILL_SLOTS:,}")  # fmt: skip
    ran = {row["slot_ms"] for row in ledger.history(ctx.redis, ctx.keys, schedule_id,
                                                    ledger.LEDGER_MAXLEN)
           if row["outcome"] in ledger.HAS_RUN}  # fmt: skip
    now = server_now_ms(ctx.clock, ctx.redis)
    todo = [s for s in slots if s not in ran]
    recorded = len(slots) - len(todo)  # counted by the script as backfill duplicates
    added: list[int] = []
    for i in range(0, max(1, len(todo)), S.MAX_BATCH):
        chunk = todo[i : i + S.MAX_BATCH]
        groups = []
        for s in chunk:
            rid = slot_run_id(schedule_id, s)
            env = Envelope(rid, spec.task, spec.payload, now, s, now, schedule_id=schedule_id)
            groups.append((rid, s, env.encode()))
        codes = ctx.scripts.run(ledger.backfill(
            ctx.keys, schedule_id, groups, recorded=recorded if i == 0 else 0,
            now_ms=ctx.clock.now_ms(), dedupe_window_ms=ctx.settings.dedupe_window_ms,
        ))  # fmt: skip
        added += [s for s, c in zip(chunk, codes, strict=True) if c == EnqueueCode.ENQUEUED]
    if added:
        _with_cas(schedule_id, lambda: _mark_backfilled(ctx, schedule_id, added))
    return len(added)


def _mark_backfilled(ctx: QueueContext, schedule_id: str, slots: list[int]) -> int:
    """The rule must not fire the backfilled slots again (the `done` record of their runs
    lasts only the dedupe window): replays of them still waiting leave the backlog, recorded
    `duplicate` now; slots not handled yet are kept in the state, for the planner."""
    spec, state, raw_spec, raw_state, nxt = load(ctx, schedule_id)
    ran = set(slots)
    dups = [s for s in state.backlog if s in ran]
    later = [s for s in slots if nxt is not None and s >= nxt and s not in state.backfilled]
    if not dups and not later:
        return ScheduleCode.UNCHANGED
    backlog = [s for s in state.backlog if s not in ran]
    new_state = replace(state, backlog=backlog, backfilled=sorted([*state.backfilled, *later]))
    records = [ledger.duplicate(schedule_id, s) for s in dups]
    head = None if spec.paused or not backlog else backlog[0]
    args = S.FireArgs(schedule_id, raw_spec, nxt, raw_state, nxt, new_state.encode(), head,
                      str(spec.overlap), spec.lease_ms, [], records)  # fmt: skip
    r = ctx.scripts.run(ledger.fire(ctx.keys, args, now_ms=ctx.clock.now_ms(),
                                    dedupe_window_ms=ctx.settings.dedupe_window_ms, trim=False))  # fmt: skip
    return ScheduleCode.UPDATED if r.ok else ScheduleCode.CHANGED


def unreadable_info(sid: str, nxt: int | None, outcome: str | None, why: str) -> ScheduleInfo:
    """The row of a rule that cannot be read: what the stores say without decoding it."""
    return ScheduleInfo(sid, "?", "?", "?", "?", False, nxt, None, None, outcome, 0, 0, 0,
                        unreadable=why)  # fmt: skip


def infos(ctx: QueueContext) -> list[ScheduleInfo]:
    k, r = ctx.keys, ctx.redis
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(k.rules)
    pipe.hgetall(k.rule_state)
    pipe.zrange(k.rule_next, 0, -1, withscores=True)
    specs, states, nexts = pipe.execute()
    nxt = {m.decode(): int(s) for m, s in nexts}
    ids = sorted(m.decode() for m in specs)
    pipe = r.pipeline(transaction=False)
    for sid in ids:
        pipe.xrevrange(k.ledger(sid), "+", "-", count=1)
    lasts = pipe.execute()
    out = []
    for sid, last in zip(ids, lasts, strict=True):
        outcome = ledger.last_outcome(last)
        try:
            spec, state = decode_rule(sid, specs[sid.encode()], states.get(sid.encode()))
        except UnreadableRule as exc:  # listed, not hidden, and the other rules still listed
            out.append(unreadable_info(sid, nxt.get(sid), outcome, exc.reason))
            continue
        out.append(ScheduleInfo(
            sid, spec.task, spec.describe(), str(spec.misfire), str(spec.overlap), spec.paused,
            nxt.get(sid), state.last_slot_ms, state.last_fire_ms, outcome, state.missed,
            state.fired, len(state.backlog), state.paused_ms if spec.paused else None,
            state.pause_note if spec.paused else None, state.paused_by if spec.paused else None,
        ))  # fmt: skip
    return out


def sync_declared(
    ctx: QueueContext, declared: dict[str, dict[str, Any]], prune: bool = False
) -> dict[str, list[str]]:
    """Upsert the rules declared in code; report (and with prune, remove) rules only in Redis."""
    names = ("created", "updated", "unchanged", "undeclared", "removed", "unreadable")
    result: dict[str, list[str]] = {n: [] for n in names}
    for sid, opts in declared.items():
        opts = dict(opts)
        try:
            code = upsert(ctx, sid, opts.pop("task"), **opts)
        except UnreadableRule as exc:
            # Kept as stored (a newer zsched's?), and the other rules synced: a dispatcher
            # that refused to start here would retry forever and dispatch nothing.
            log.error("%s; kept as stored, the other declared schedules are synced", exc,
                      extra={"queue": ctx.queue, "schedule_id": sid})  # fmt: skip
            result["unreadable"].append(sid)
            continue
        result[code.name.lower()].append(sid)
    stored = {m.decode() for m in ctx.redis.hkeys(ctx.keys.rules)}
    for sid in sorted(stored - set(declared)):
        if prune and remove(ctx, sid):
            result["removed"].append(sid)
        else:
            result["undeclared"].append(sid)
            log.warning("schedule %s is in Redis but not declared in code (kept; prune removes)",
                        sid, extra={"queue": ctx.queue})  # fmt: skip
    return result
