"""An executable reference model of one recurring rule, written from docs/policies.md.

Pure Python, no Redis, nothing of zsched.rules: a rule's slot instants come from the model's
own enumerator (tests/model/slots.py, from the doc's cron fields, zones and DST choices; it
reads a product trigger as data only, and is checked against the product's triggers in
test_slots_vs_triggers.py); the policies are applied as the document states them:

- a slot within `misfire_grace` of the pass that handles it is on time and fires (`ran`);
- missed slots: `catch_up` replays them oldest first, at most `max_catch_up` (the newest),
  the older ones `skipped: catch_up_cap`; `coalesce` runs one for all (the on-time fire if one
  is due, else the newest missed slot, `ran_late`), the others `coalesced into <run id>`;
  `skip` records each `skipped: grace_passed`;
- on-time fires first, then replays; under overlap skip/queue replays run one at a time, only
  while no run holds the lease and no new fire starts in the same pass;
- overlap (a new fire while a live run holds the lease): `allow` runs it; `skip` records
  `skipped: overlap: <holder> still running`; `queue` keeps one waiting (recorded with
  `queued behind <holder>`; it starts when the holder ends), a further one is skipped;
- the lease lasts for the run's whole life (ready, running, waiting for a retry) and ends at
  done or dead;
- a backfill runs its slots now, without a lease; the rule never fires a backfilled slot
  again (`duplicate`; a waiting replay of it is recorded so at the backfill);
- a manual fire (`run_now`, `<id>@manual:<now>`, recorded `manual` at now) obeys overlap
  like any fire unless forced, and moves no slot; a forced one started under the run id of
  the fire waiting (a queued manual fire of the same instant) is that fire: it waits no more;
- a paused queue starts nothing; rule slots are still fired and recorded on time;
- pause: no slot fires; on resume the slots from the pause up to now are `skipped: paused`,
  the rule goes on from the first slot after now; catch-up replays waiting are kept; a due
  slot an edit during an outage kept from the old trigger is `skipped: paused` at the pause;
- a `dst_gap="skip"` cron rule records `skipped: dst_gap` at the instant a gap dropped a slot
  (written when the rule next comes due);
- jitter: a fire is due `crc32("<schedule_id>@<slot ms>") % jitter_ms` after its slot.

Time moves in events (`advance_to`). At one instant, runs that end then end first (freeing
the lease, starting a waiting fire), then the dispatcher's pass, then due runs start at once
(workers are never the bottleneck here), again until nothing changes. A run's fate is a
function of (run id, attempt): its duration, and whether it succeeds, retries after a delay
or fails (dead letter); a retry asked on the task's last attempt (MAX_ATTEMPTS) is a dead
letter too (docs/protocol.md, "Finish").
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tests.model import slots as calendar

#: A product trigger (zsched.rules.triggers.Cron or Every, handed to the real system) or the
#: enumerator's own spec; the model reads either as data through calendar.spec_of.
Trigger = Any


@dataclass(frozen=True)
class Fate:
    """What one attempt of a run does: takes `duration_ms`, then ok | retry | fail."""

    duration_ms: int = 0
    kind: str = "ok"
    retry_delay_ms: int = 0


@dataclass(frozen=True)
class RuleDef:
    schedule_id: str
    trigger: Trigger
    misfire: str = "coalesce"
    grace_ms: int | None = None  # None: the documented default
    max_catch_up: int = 10
    overlap: str = "allow"
    jitter_ms: int = 0

    def grace(self) -> int:
        if self.grace_ms is not None:
            return self.grace_ms
        # "half the rule's shortest period, at most 60 s"
        return min(60_000, shortest_period(self.trigger) // 2)


#: Two weeks of 2026 no zone the machine draws changes its offset in (mid-January, mid-June:
#: both hemispheres, Lord Howe and Santiago included), for the period "outside DST changes".
_QUIET_WEEKS_MS = (1_768_003_200_000, 1_781_049_600_000)  # 2026-01-10, 2026-06-10 (00:00Z)


@functools.lru_cache(maxsize=256)
def shortest_period(trigger: Trigger) -> int:
    """The shortest gap between consecutive slots outside DST changes (docs: jitter and the
    default grace): the smallest gap among 24 slots from each of two quiet weeks (not the
    product's method: its 12 fires from 2000-01-01)."""
    spec = calendar.spec_of(trigger)
    if isinstance(spec, calendar.EverySpec):
        return spec.interval_ms
    gaps = []
    for t in _QUIET_WEEKS_MS:
        slots = calendar.slots_between(spec, t, 2**53, 24)
        gaps += [b - a for a, b in zip(slots, slots[1:], strict=False)]
    return min(gaps)


def run_id(sid: str, slot: int) -> str:
    """`<schedule_id>@<slot in UTC ISO-8601>` (docs: "Each fire is a run with the id ...")."""
    dt = datetime.fromtimestamp(slot / 1000, UTC)
    frac = f".{slot % 1000:03d}" if slot % 1000 else ""
    return f"{sid}@{dt.strftime('%Y-%m-%dT%H:%M:%S')}{frac}Z"


def manual_run_id(sid: str, now: int) -> str:
    """`<schedule_id>@manual:<now in UTC ISO-8601>` (docs: "Run a rule now")."""
    return run_id(sid, now).replace("@", "@manual:", 1)


#: The task's max_attempts in both systems (real_system.py, worker_child.py register it so).
MAX_ATTEMPTS = 5


@dataclass
class Run:
    run_id: str
    slot: int
    attempt: int = 1
    state: str = "delayed"  # delayed | running | done | dead
    due: int = 0
    finish: int = 0
    fate: Fate = field(default_factory=Fate)


@dataclass
class Model:
    """One rule, its runs and its ledger. Drive it with the operations; read `ledger`,
    `live()` and `lease`."""

    rule: RuleDef
    fate_of: Callable[[str, int], Fate]
    now: int = 0
    up: bool = True
    paused: bool = False
    created: bool = False
    removed: bool = False
    next_slot: int | None = None
    paused_at: int | None = None
    gap_checked: int | None = None
    backlog: list[int] = field(default_factory=list)
    ledger: list[tuple[int, str, str, str]] = field(default_factory=list)
    runs: dict[str, Run] = field(default_factory=dict)
    lease: str | None = None
    waiting: tuple[str, int] | None = None
    started: list[tuple[str, int, int]] = field(default_factory=list)  # run, attempt, at
    backfilled: set[str] = field(default_factory=set)
    #: Manual fires made with force=True: they hold no lease and run beside the rule's run.
    forced: set[str] = field(default_factory=set)
    queue_paused: bool = False

    # -- operations ---------------------------------------------------------------------------

    def create(self, paused: bool = False) -> None:
        self.created, self.paused = True, paused
        self.created_at = self.now
        self.gap_checked = self.now - 1
        self.next_slot = None if paused else self._first_after(self.now - 1)
        self.paused_at = self.now if paused else None
        self.settle()

    def edit(self, **changes: Any) -> None:
        """Change the rule: a slot already due fires under the new definition; otherwise the
        next fire is recomputed from now; waiting replays are kept."""
        old = self.rule.trigger
        if self.paused and self.paused_at is not None and changes.get("trigger", old) != old:
            # "Each slot is judged by the trigger in force when it happens": the old
            # trigger's slots of the pause so far are `skipped: paused`, recorded now.
            self._record_paused(self.paused_at)
            self.paused_at = self.now + 1
        self.rule = replace(self.rule, **changes)
        if self.rule.trigger != old:
            self.gap_checked = self.now  # DST gaps from now on are the new trigger's
        nxt = self.next_slot
        if self.rule.trigger != old and not self.paused and (nxt is None or nxt > self.now):
            self.next_slot = self._first_after(self.now)
        self.settle()

    def pause(self) -> None:
        if self.paused:
            return
        self.paused = True
        nxt = self.next_slot
        self.paused_at = nxt if nxt is not None else self.now
        if nxt is not None and nxt <= self.now and self._first_after(nxt - 1) != nxt:
            # An edit during an outage kept this due slot of the old trigger; the resume
            # lists the current trigger's slots only: "a slot already due when the rule is
            # paused is `skipped: paused`", recorded now, and the pause starts after it.
            self._record(nxt, "skipped", "paused", run_id(self.rule.schedule_id, nxt))
            self.paused_at = nxt + 1
        self.next_slot = None
        self.settle()

    def resume(self) -> None:
        if not self.paused:
            return
        since = self.paused_at if self.paused_at is not None else self.now
        self._record_paused(since)
        self.paused, self.paused_at = False, None
        self.next_slot = self._first_after(self.now)
        self.settle()

    def _record_paused(self, since: int) -> None:
        # "the slots from the pause to the resume are recorded `skipped: paused`": all of them
        # (the product writes one range entry past 1,000; real_system.ledger lists its slots).
        for s in calendar.slots_between(self.rule.trigger, since - 1, self.now, 10**7):
            self._record(s, "skipped", "paused", run_id(self.rule.schedule_id, s))

    def backfill(self, lo: int, hi: int) -> None:
        """The rule's slots in [lo, hi] that the ledger does not show as run, due now with
        their usual run ids (none whose run is live or done), recorded `backfilled`. They
        hold no lease: overlap does not apply to them. The rule never fires a backfilled
        slot again: a replay of it still waiting is recorded `duplicate` now and leaves the
        backlog; a later fire or replay of it is recorded `duplicate`."""
        slots = calendar.slots_between(self.rule.trigger, lo - 1, hi, 10_001)
        if len(slots) > 10_000:  # docs: a longer range is refused, nothing enqueued
            raise ValueError("a backfill of more than 10,000 slots is refused")
        done = {s for s, o, _, _ in self.ledger if o in ("ran", "ran_late", "backfilled")}
        for s in slots:
            rid = run_id(self.rule.schedule_id, s)
            if s in done or (rid in self.runs and self.runs[rid].state != "dead"):
                continue
            self.runs[rid] = Run(rid, s, due=self.now)
            self.backfilled.add(rid)
            self._record(s, "backfilled", "backfill", rid)
        self._drop_backfilled_replays()
        self.settle()

    def _drop_backfilled_replays(self) -> None:
        sid = self.rule.schedule_id
        for s in [s for s in self.backlog if run_id(sid, s) in self.backfilled]:
            self._record(s, "duplicate", "run id already live or done", run_id(sid, s))
            self.backlog.remove(s)

    def run_now(self, force: bool = False) -> None:
        """A manual fire (`run_schedule_now`): run id `<id>@manual:<now>`, recorded at `now`
        as `manual`; the rule's slots, next fire and backlog stay as they were. Overlap holds
        as for any fire (skip: `skipped: overlap`, queue: waits, `queued behind`) unless
        `force`: then it neither waits for nor takes the lease. A paused rule runs too."""
        rid = manual_run_id(self.rule.schedule_id, self.now)
        if force:
            if rid in self.runs and self.runs[rid].state != "dead":
                self._record(self.now, "duplicate", "run id already live or done", rid)
            else:
                self.runs[rid] = Run(rid, self.now, due=self.now)
                self.forced.add(rid)
                self._record(self.now, "manual", "", rid)
                if self.waiting is not None and self.waiting[0] == rid:
                    self.waiting = None  # the fire that waited is this run now
        else:
            self._fire([(self.now, self.now, "manual")], rid)
        self.settle()

    def pause_queue(self) -> None:
        """Nothing is dispatched (no run starts) until resume_queue; rule slots are still
        materialised on time and recorded, their runs wait (grace does not apply: a slot
        handled on time is not missed); runs already running go on."""
        self.queue_paused = True
        self.settle()

    def resume_queue(self) -> None:
        self.queue_paused = False
        self.settle()

    def kill_worker(self, held: set[str] | None = None) -> None:
        """A worker dies: each attempt it was running (`held`; None: every running one)
        starts again now (reclaimed by another worker, same attempt, its duration again); the
        lease stays with its run."""
        for r in self.runs.values():
            if r.state == "running" and (held is None or r.run_id in held):
                r.finish = self.now + r.fate.duration_ms
        self.settle()

    def remove(self) -> None:
        """The rule goes with its state, ledger, lease and waiting fire; runs it made stay."""
        self.removed = True
        self.ledger, self.backlog = [], []
        self.next_slot, self.lease, self.waiting = None, None, None
        self.settle()

    def set_up(self, up: bool) -> None:
        self.up = up
        self.settle()

    def advance_to(self, t: int) -> None:
        """Move time to `t`, through every event on the way."""
        while True:
            e = self.next_event()
            if e is None or e > t:
                break
            self.now = e
            self.settle()
        self.now = t
        self.settle()

    # -- what can be read ---------------------------------------------------------------------

    def live(self) -> set[str]:
        """Run ids that exist (delayed, ready, running, waiting for a retry)."""
        return {r.run_id for r in self.runs.values() if r.state in ("delayed", "running")}

    def outcomes(self) -> dict[int, list[tuple[str, str]]]:
        out: dict[int, list[tuple[str, str]]] = {}
        for slot, outcome, reason, _ in self.ledger:
            out.setdefault(slot, []).append((outcome, reason))
        return out

    def next_event(self) -> int | None:
        cands = [r.finish for r in self.runs.values() if r.state == "running"]
        if self.up and not self.queue_paused:
            cands += [r.due for r in self.runs.values() if r.state == "delayed"]
            if self.next_slot is not None and not self.removed:
                cands.append(self.next_slot)
        later = [c for c in cands if c > self.now]
        return min(later) if later else None

    # -- one instant --------------------------------------------------------------------------

    def settle(self) -> None:
        """Everything that happens at `now`, until nothing changes."""
        for _ in range(1000):
            changed = self._finish_runs()
            if self.up and self.created and not self.removed:
                changed |= self._pass()
            if self.up and not self.queue_paused:
                changed |= self._start_due()
            if not changed:
                return
        raise AssertionError("the model did not settle")

    def _finish_runs(self) -> bool:
        done = sorted((r for r in self.runs.values()
                       if r.state == "running" and r.finish <= self.now),
                      key=lambda r: (r.finish, r.run_id))  # fmt: skip
        for r in done:
            if r.fate.kind == "retry" and r.attempt < MAX_ATTEMPTS:
                r.attempt += 1
                r.state, r.due = "delayed", r.finish + r.fate.retry_delay_ms
                continue  # the lease stays with the run
            r.state = "done" if r.fate.kind == "ok" else "dead"
            self._unlease(r.run_id)
        return bool(done)

    def _unlease(self, rid: str) -> None:
        if self.lease == rid:
            self.lease = None
        if self.lease is None and self.waiting is not None:
            wid, slot = self.waiting
            self.waiting = None
            # Live or done under its id (a forced manual fire of the same instant): dropped,
            # as any fire of a run id live or done (invariant 2).
            if wid not in self.runs or self.runs[wid].state == "dead":
                self.runs[wid] = Run(wid, slot, due=self.now)
                self.lease = wid

    def _lease_held(self) -> bool:
        return self.lease is not None and self.runs[self.lease].state in ("delayed", "running")

    def _pass(self) -> bool:
        rule, now = self.rule, self.now
        before = (len(self.ledger), len(self.runs), self.next_slot, list(self.backlog))
        slots: list[int] = []
        if not self.paused and self.next_slot is not None and self.next_slot <= now:
            # The stored next fire first, even if an edit changed the trigger: "a slot that is
            # already due fires under the new definition".
            # Every missed slot, however long the outage: "every missed slot ... gets its
            # outcome"; catch_up keeps the newest max_catch_up of the whole outage.
            nxt = self.next_slot
            slots = [nxt, *calendar.slots_between(self.rule.trigger, nxt, now, 10**7)]
            self.next_slot = self._first_after(now)
            self._dst_gaps()  # checked when the rule comes due
        on_time = [s for s in slots if now - s <= rule.grace()]
        late = [s for s in slots if now - s > rule.grace()]
        fires = [(s, s + self._jitter(s), "ran") for s in on_time]
        fires += self._misfire(on_time, late)
        self._drop_backfilled_replays()
        room = self._replay_room(bool(fires))
        fires += [(s, now, "ran_late") for s in self.backlog[:room]]
        self.backlog = self.backlog[room:]
        self._fire(fires)
        return before != (len(self.ledger), len(self.runs), self.next_slot, self.backlog)

    def _misfire(self, on_time: list[int], late: list[int]) -> list[tuple[int, int, str]]:
        """Records for the missed slots; returns a coalesced fire, if any."""
        rule, sid = self.rule, self.rule.schedule_id
        if not late:
            return []
        if rule.misfire == "catch_up":
            self.backlog += late
            cut = max(0, len(self.backlog) - rule.max_catch_up)
            for s in self.backlog[:cut]:
                self._record(s, "skipped", "catch_up_cap", run_id(sid, s))
            self.backlog = self.backlog[cut:]
            return []
        if rule.misfire == "skip":
            for s in late:
                self._record(s, "skipped", "grace_passed", run_id(sid, s))
            return []
        target = on_time[0] if on_time else late[-1]
        into = run_id(sid, target)
        for s in late:
            if s != target:
                self._record(s, "coalesced", f"into {into}", into)
        return [] if on_time else [(target, self.now + self._jitter(target, self.now), "ran_late")]

    def _replay_room(self, new_fires: bool) -> int:
        """Replays that may start now: all (within the budget) under allow; else one, only
        while no run holds the lease and no new fire starts in this pass."""
        if self.paused:
            return 0
        if self.rule.overlap == "allow":
            return 100
        free = not self._lease_held() and self.waiting is None
        return 1 if free and not new_fires else 0

    def _fire(self, fires: list[tuple[int, int, str]], manual: str = "") -> None:
        sid = self.rule.schedule_id
        for slot, due, outcome in fires:
            rid = manual or run_id(sid, slot)
            # Live or done, or backfilled (whatever became of that run): never again.
            if rid in self.backfilled or (rid in self.runs and self.runs[rid].state != "dead"):
                self._record(slot, "duplicate", "run id already live or done", rid)
            elif self.rule.overlap != "allow" and self._lease_held():
                if self.rule.overlap == "queue" and self.waiting is None:
                    self.waiting = (rid, slot)
                    self._record(slot, outcome, f"queued behind {self.lease}", rid)
                else:
                    self._record(slot, "skipped", f"overlap: {self.lease} still running", rid)
            else:
                self.runs[rid] = Run(rid, slot, due=due)
                if self.rule.overlap != "allow":
                    self.lease = rid
                self._record(slot, outcome, "", rid)

    def _start_due(self) -> bool:
        due = sorted((r for r in self.runs.values() if r.state == "delayed" and r.due <= self.now),
                     key=lambda r: (r.due, r.run_id))  # fmt: skip
        for r in due:
            r.fate = self.fate_of(r.run_id, r.attempt)
            r.state, r.finish = "running", self.now + r.fate.duration_ms
            self.started.append((r.run_id, r.attempt, self.now))
        return bool(due)

    def _dst_gaps(self) -> None:
        trig = calendar.spec_of(self.rule.trigger)
        if not isinstance(trig, calendar.CronSpec) or self.gap_checked is None:
            return
        if calendar.policy(trig)[0] != "skip" or self.now <= self.gap_checked:
            return
        shifted = replace(trig, dst_gap="shift")
        own = set(calendar.slots_between(trig, self.gap_checked, self.now, 1000))
        for g in calendar.slots_between(shifted, self.gap_checked, self.now, 1000):
            if g not in own:
                self._record(g, "skipped", "dst_gap", run_id(self.rule.schedule_id, g))
        self.gap_checked = self.now

    def _jitter(self, slot: int, base: int | None = None) -> int:
        """The slot's spread, cut so that its fire (due at `base` + it) comes before the
        rule's next slot (docs: "Jitter never reorders fires")."""
        j = self.rule.jitter_ms
        if not j:
            return 0
        spread = zlib.crc32(f"{self.rule.schedule_id}@{slot}".encode()) % j
        nxt = self._first_after(slot)
        room = spread if nxt is None else nxt - (slot if base is None else base) - 1
        return max(0, min(spread, room))

    def _first_after(self, ms: int) -> int | None:
        return calendar.first_after(self.rule.trigger, ms)

    def _record(self, slot: int, outcome: str, reason: str, rid: str) -> None:
        self.ledger.append((slot, outcome, reason, rid))
