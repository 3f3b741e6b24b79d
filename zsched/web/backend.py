"""The console's one seam to Redis: every read and action of a page is a method here.

`SyncBackend` drives the sync `zsched.App` (one per queue) and the bounded reads of
`zsched.web.reads`; pages call it through `Console.call`, which runs a sync method in
Starlette's thread pool and awaits an async one directly. `AsyncBackend`
(zsched/web/aio_backend.py, over `zsched.AsyncApp`) replaces it method by method.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from starlette.concurrency import run_in_threadpool

import zsched.web.reads as reads
import zsched.web.rule_reads as rule_reads
from zsched.app import App
from zsched.dispatch.simulate import simulate
from zsched.errors import UnreadableRule
from zsched.rules.spec import build_spec, spec_options
from zsched.web.health import Sampler, Thresholds, causes, verdict
from zsched.web.run_controls import RunControls
from zsched.web.words import paused_line

#: Characters of a payload shown on a page; the rest is cut (and says so).
PAYLOAD_DISPLAY_MAX = 16_384
#: Upcoming fires listed per rule.
NEXT_FIRES = 5
#: Slots one "what if" simulation may cover (its cost grows with them).
SIMULATE_MAX_SLOTS = 500


def pretty_payload(payload: Any) -> str:
    """The payload as indented JSON (bytes shown as their repr), cut at PAYLOAD_DISPLAY_MAX."""
    text = json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True, default=repr)
    if len(text) > PAYLOAD_DISPLAY_MAX:
        return text[:PAYLOAD_DISPLAY_MAX] + f"\n… cut: {len(text):,} characters in all"
    return text


def next_fires(spec: Any, after_ms: int, n: int = NEXT_FIRES) -> list[int]:
    """The rule's next `n` slots after `after_ms` within its start and end (pure)."""
    out: list[int] = []
    t: int | None = after_ms
    while t is not None and len(out) < n:
        t = spec.first_slot_after(t)
        if t is not None:
            out.append(t)
    return out


def run_view(st: Any, env: Any) -> dict[str, Any]:
    """What the run page shows: the RunStatus, and its envelope's payload (None: gone)."""
    out: dict[str, Any] = st.as_dict()
    out["payload"] = None if env is None else pretty_payload(env.payload)
    out["schedule_id"] = env.schedule_id if env else None
    out["max_attempts"] = env.max_attempts if env else None
    # Outcomes are kept for tasks with keep_result=True: the return value, pretty-printed.
    out["result_text"] = None if st.attempts is None else pretty_payload(st.result)
    return out


def rule_view(spec: Any, state: Any, nxt: int | None, now_ms: int, missing: list[int],
              ledger: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """What a rule's page shows, from its reads."""
    return {
        "unreadable": None, "unaccounted": missing,
        "spec": spec, "state": state, "next_fire_ms": nxt,
        "next": [] if spec.paused else next_fires(spec, now_ms),
        "ledger": ledger,
        "options": spec_options(spec),
        "payload": pretty_payload(spec.payload),
    }  # fmt: skip


def unreadable_view(exc: UnreadableRule, nxt: Any, ledger: list[dict[str, Any]]
                    ) -> dict[str, Any]:  # fmt: skip
    """What the page of a rule that cannot be read shows: why, its next fire and its ledger
    (the template offers to remove it, nothing that needs it decoded)."""
    return {"unreadable": str(exc), "spec": None, "state": None, "unaccounted": [], "next": [],
            "next_fire_ms": None if nxt is None else int(nxt), "ledger": ledger}  # fmt: skip


def dead_rows(letters: list[Any]) -> list[dict[str, Any]]:
    """Dead letters as the page shows them: attempt and the payload, pretty-printed."""
    rows = []
    for d in letters:
        env = reads.envelope_of(d.envelope, d.run_id)
        rows.append({"d": d, "attempt": env.attempt if env else None,
                     "payload": pretty_payload(env.payload) if env else "(unreadable)"})  # fmt: skip
    return rows


def edited_options(spec: Any, schedule_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """The rule's stored options with the edited trigger/policy fields over them, validated
    as App.schedule validates them (RuleError names the bad field) before anything is
    written."""
    opts = spec_options(spec)
    opts.pop("paused")  # pausing has its own actions
    if "cron" in changes or "every" in changes:
        for k in ("cron", "every", "tz", "dst_gap", "dst_repeat"):
            opts.pop(k, None)
    opts.update(changes)
    build_spec(schedule_id, spec.task, **opts)
    return opts


@dataclass
class SyncBackend(RunControls):
    """Reads and actions over sync Apps, one per queue (partitioned queues included); the
    run controls (reschedule, run now, pauses) come from RunControls."""

    apps: dict[str, App]
    thresholds: Thresholds
    sampler: Sampler
    #: Per partition: the audit's HSCAN cursor, {rule: unaccounted slots} and {rule: why it
    #: cannot be read} found so far.
    audits: dict[str, tuple[int, dict[str, int], dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def build(cls, apps: Sequence[App], thresholds: Thresholds | None = None) -> SyncBackend:
        return cls({a.queue: a for a in apps}, thresholds or Thresholds(), Sampler())

    def app(self, queue: str) -> App:
        try:
            return self.apps[queue]
        except KeyError:
            raise LookupError(f"the console does not serve queue {queue!r}") from None

    def part(self, queue: str, partition: int) -> App:
        app = self.app(queue)
        if not 0 <= partition < app.partitions:
            raise LookupError(f"queue {queue!r} has no partition {partition}")
        return app.partition_view(partition) if app.partitions > 1 else app

    # -- overview -----------------------------------------------------------------------------

    def overview(self, queue: str) -> dict[str, Any]:
        """Counts, rates, workers, newest ready runs and the verdict of each partition."""
        app = self.app(queue)
        views = app.partition_views()
        statuses = app.partition_statuses() if app.partitions > 1 else [app.status()]
        parts = [self._part(v, st) for v, st in zip(views, statuses, strict=True)]
        every = [c for p in parts for c in p["causes"]]
        keys = ("delayed", "due", "ready", "pending", "dead", "rules")
        total = {k: sum(p[k] for p in parts) for k in keys}
        return {"queue": queue, "partitions": parts, "total": total, "verdict": verdict(every),
                "healthy": not every,
                "unreadable": [u for p in parts for u in p["unreadable"]]}  # fmt: skip

    def _part(self, view: App, st: Any) -> dict[str, Any]:
        r, k = view.redis, view.keys
        name = k.queue if k.partition is None else f"{k.queue}#{k.partition}"
        self.sampler.add(name, st.now_ms, st.stats, st.due)
        late = reads.late_rule(r, k, st.now_ms - self.thresholds.late_rule_ms)
        entries, consumers = reads.consumers(r, k)
        part: dict[str, Any] = {
            "name": name, "now_ms": st.now_ms, "delayed": st.delayed, "due": st.due,
            "oldest_due_age_ms": st.oldest_due_age_ms,
            "ready": max(0, st.stream_length - st.pending), "pending": st.pending,
            "oldest_pending_idle_ms": st.oldest_pending_idle_ms, "dead": st.dead,
            "stats": st.stats, "rates": self.sampler.rates(name),
            "backlog_growing": self.sampler.backlog_growing(name),
            "new_dead": self.sampler.new_dead(name),
            "consumers": [vars(c) for c in consumers],
            "entries": entries,
            "dispatchers": self.dispatchers(view, st.now_ms),
            "paused": paused_line(st.paused_ms, st.pause_note) if st.paused else "",
            "newest_ready": [{"entry_id": e, "run_id": rid} for e, rid in reads.newest_ready(r, k)],
            "late_rule": None if late is None else {
                "schedule_id": late[0], "late_ms": st.now_ms - late[1]},
            "rules": int(r.hlen(k.rules)),
        }  # fmt: skip
        part["unaccounted"], bad = self._audit(view, name, st.now_ms)
        part["unreadable"] = [{"schedule_id": s, "reason": why} for s, why in sorted(bad.items())]
        part["causes"] = causes(part, self.thresholds)
        return part

    def _audit(self, view: App, name: str, now_ms: int) -> tuple[dict[str, int], dict[str, str]]:
        """Audit the next few rules of the partition (rotating, so every view stays bounded):
        the rules found with unaccounted slots, and those that cannot be read, stay listed
        until audited clean (or read) again."""
        cursor, found, bad = self.audits.get(name, (0, {}, {}))
        b = rule_reads.audit_rules(view, cursor, now_ms)
        # A new round (cursor 0) forgets rules removed since; a rule audited clean drops out.
        counts = {**(found if cursor else {}), **b.unaccounted}
        why = {**(bad if cursor else {}), **b.unreadable}
        self.audits[name] = (b.next_cursor,
                             {k: v for k, v in counts.items() if v and k not in b.unreadable},
                             {k: v for k, v in why.items() if k not in b.unaccounted})  # fmt: skip
        return self.audits[name][1], self.audits[name][2]

    # -- runs ---------------------------------------------------------------------------------

    def run(self, queue: str, run_id: str) -> dict[str, Any]:
        """One run's state (App.get_run) and its payload, pretty-printed and capped."""
        app = self.app(queue)
        st = app.get_run(run_id)
        env = None
        if st.state not in ("done", "cancelled"):
            home = app.keys_for_run(run_id)
            env = reads.run_envelope(app.redis, home, run_id, dead=st.state == "dead")
        return run_view(st, env)

    def delayed(self, queue: str, partition: int, cursor: str, task: str) -> reads.DelayedPage:
        view = self.part(queue, partition)
        return reads.delayed_page(view.redis, view.keys, cursor, task)

    # -- rules --------------------------------------------------------------------------------

    def rules(self, queue: str, partition: int, cursor: int, match: str) -> dict[str, Any]:
        view = self.part(queue, partition)
        page = rule_reads.rules_page(view.redis, view.keys, cursor, match)
        now = int(view.redis.time()[0]) * 1000
        rows = [{"info": info, "spec": spec, "next": next_fires(spec, now) if spec else []}
                for info, spec in page.rules]  # fmt: skip
        return {"rows": rows, "next_cursor": page.next_cursor, "total": page.total}

    def rule(self, queue: str, schedule_id: str) -> dict[str, Any]:
        """Spec, state, the next fires and the ledger (newest 100) of one rule."""
        home = self.app(queue).rule_home(schedule_id)
        try:
            spec, state, nxt = rule_reads.rule(home, schedule_id)
        except UnreadableRule as exc:  # its page says why, and offers to remove it
            nxt = home.redis.zscore(home.keys.rule_next, schedule_id)
            return unreadable_view(exc, nxt, home.schedule_history(schedule_id, reads.PAGE_MAX))
        now = int(home.redis.time()[0]) * 1000
        missing = rule_reads.audit_rule(home, schedule_id, spec, state, now)
        ledger = home.schedule_history(schedule_id, reads.PAGE_MAX)
        return rule_view(spec, state, nxt, now, missing, ledger)

    def simulate(self, queue: str, schedule_id: str, from_ms: int, to_ms: int,
                 slow_s: float | None) -> list[Any]:  # fmt: skip
        """The simulator's slot-by-slot result; refuses windows over SIMULATE_MAX_SLOTS."""
        home = self.app(queue).rule_home(schedule_id)
        spec, _state, _ = rule_reads.rule(home, schedule_id)
        if to_ms <= from_ms:
            raise ValueError("the outage must end after it starts")
        if (
            len(spec.trigger.slots_between(from_ms, to_ms, SIMULATE_MAX_SLOTS + 1))
            > SIMULATE_MAX_SLOTS
        ):
            raise ValueError(f"the window holds more than {SIMULATE_MAX_SLOTS} slots; shorten it")
        return simulate(home.ctx, schedule_id, from_ms, to_ms, slow_s)

    # -- dead letters -------------------------------------------------------------------------

    def dead(self, queue: str, cursor: str, task: str, reason: str) -> dict[str, Any]:
        """A page of dead letters (oldest first) after `cursor`; filtered pages come from a
        bounded scan (reads.DEAD_SCAN_MAX)."""
        app = self.app(queue)
        if task or reason:
            m = reads.dead_matching(app, task, reason, keep=reads.PAGE_MAX)
            letters, nxt = m.letters, None
            count, complete = len(m.entry_ids), m.complete
        else:
            start = "(" + cursor if cursor else "-"
            letters = app.dead_letters(count=reads.PAGE_MAX, start=start)
            nxt = letters[-1].entry_id if len(letters) == reads.PAGE_MAX else None
            count, complete = app.status().dead, True
        return {"rows": dead_rows(letters), "next_cursor": nxt, "count": count,
                "complete": complete}  # fmt: skip

    def dead_count(self, queue: str, task: str, reason: str) -> reads.DeadMatch:
        return reads.dead_matching(self.app(queue), task, reason)

    # -- actions (each one call of the public API) ----------------------------------------------

    def resume(self, queue: str, schedule_id: str) -> str:
        ok = self.app(queue).resume_schedule(schedule_id)
        return f"resumed rule {schedule_id}" if ok else f"rule {schedule_id} was not paused"

    def remove(self, queue: str, schedule_id: str) -> str:
        ok = self.app(queue).unschedule(schedule_id)
        return f"removed rule {schedule_id}" if ok else f"no rule {schedule_id}"

    def edit(self, queue: str, schedule_id: str, changes: dict[str, Any]) -> str:
        """Apply edited trigger/policy fields over the stored options (validated as
        App.schedule validates them, before anything is written)."""
        app = self.app(queue)
        spec, _state, _ = rule_reads.rule(app.rule_home(schedule_id), schedule_id)
        app.schedule(schedule_id, spec.task, **edited_options(spec, schedule_id, changes))
        return f"saved rule {schedule_id}"

    def backfill(self, queue: str, schedule_id: str, start: datetime, end: datetime) -> str:
        n = self.app(queue).backfill(schedule_id, start, end)
        return f"backfill of {schedule_id}: {n} run(s) enqueued"

    def replay(self, queue: str, entry_ids: list[str]) -> str:
        counts = self.app(queue).replay_dead(entry_ids)
        return "replayed: " + ", ".join(f"{k} {v}" for k, v in counts.items())

    def purge(self, queue: str, entry_ids: list[str]) -> str:
        n = self.app(queue).purge_dead(entry_ids)
        return f"purged {n} dead letter(s)"

    def replay_matching(self, queue: str, task: str, reason: str) -> str:
        """Replay every dead letter the filter matches (the bounded scan's ids)."""
        m = reads.dead_matching(self.app(queue), task, reason)
        if not m.entry_ids:
            return "no dead letter matches"
        return self.replay(queue, m.entry_ids) + scan_note(m)

    def purge_matching(self, queue: str, task: str, reason: str) -> str:
        m = reads.dead_matching(self.app(queue), task, reason)
        return self.purge(queue, m.entry_ids) + scan_note(m)


def scan_note(m: reads.DeadMatch) -> str:
    """What a bulk action over a filter says when its bounded scan did not reach the end."""
    return "" if m.complete else f" (of the first {m.scanned:,} scanned; run it again for more)"


class Console:
    """What the pages hold: the backend and how to call it from the event loop."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    async def call(self, method: str, *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(self.backend, method)
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        return await run_in_threadpool(fn, *args)
