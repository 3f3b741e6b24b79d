"""The dispatcher's RuleFirer: reads the due rules each pass, plans each one
(zsched/rules/plan.py) and applies the plan with the `fire` script's compare-and-set."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from zsched.clock import time_reply_ms
from zsched.errors import RuleError
from zsched.protocol.text import text
from zsched.rules import ledger
from zsched.rules.plan import CATCH_UP_BLOCKED_MS, CATCH_UP_PAUSE_MS, Plan, fire_args, plan
from zsched.rules.spec import Spec, decode_spec, decode_state
from zsched.store import scripts as S
from zsched.store.connection import is_cluster

if TYPE_CHECKING:
    from zsched.context import QueueContext

log = logging.getLogger(__name__)


#: A pass reads the rules at least this often even with no change announced on `wake`
#: (rules written by a client that does not publish). Idle dispatchers pass less often than
#: this anyway (max_idle_ms), so it adds no request then.
RULES_RECHECK_S = 5.0
#: Passes of one tick while a rule stays due (1,000 slots each: an outage of 10,000 slots is
#: judged before any run it fired is dispatched; a longer one goes on at the next tick).
PASSES_PER_TICK = 10


class RuleFirer:
    """A dispatcher part: fires the due rules of one queue each pass (see Dispatcher.parts)."""

    def __init__(self, ctx: QueueContext, redis: Any, scripts: S.AsyncScripts, *,
                 rules_per_pass: int = 100, catch_up_budget: int = 100,
                 max_backlog: int = 50_000) -> None:  # fmt: skip
        self.ctx = ctx
        self.redis = redis
        self.scripts = scripts
        self.rules_per_pass = rules_per_pass
        self.catch_up_budget = catch_up_budget
        self.max_backlog = max_backlog
        self.conflicts = 0
        #: Rules of the last pass whose catch-up replays wait for the overlap lease.
        self.blocked = 0
        self.audit_every_s = 60.0
        self._next_audit = 0.0
        # What the last pass learned: the earliest next fire (Redis clock; None: no rule) and
        # when, on this process's monotonic clock, that is. Until then, and unless told of a
        # change (invalidate), a pass need not read the rules: one round trip less before
        # every timed dispatch.
        self._known: int | None = None
        self._due_at = 0.0
        self._read_at = -RULES_RECHECK_S
        self._dirty = True
        self._now = 0  # the Redis time of the last pass that read the rules
        #: Rules whose stored spec or state this process cannot decode (corrupt, or written by
        #: a newer zsched), by id: the raw spec that failed (None: no spec) and the raw state
        #: when the state is what failed (else None: not watched).
        #: They are left out of the due rules and of the next fire until either changes, so a
        #: due one neither spins the loop (its score stays <= now) nor is logged every pass.
        #: Never written to Redis.
        self._unreadable: dict[str, tuple[bytes | None, bytes | None]] = {}

    def invalidate(self) -> None:
        """Read the rules at the next pass: something was published on `wake` (a rule was
        created or changed: schedule.lua publishes), or the subscription was interrupted."""
        self._dirty = True

    def _still_known(self, now_ms: int | None) -> bool:
        mono = time.monotonic()
        if self._dirty or mono - self._read_at >= RULES_RECHECK_S:
            return False
        if self._known is None:
            return True
        if now_ms is not None:  # a fake clock: both times are its own
            return now_ms < self._known
        return mono < self._due_at

    def _learn(self, head: int | None, now: int, read_at: float) -> int | None:
        self._known, self._read_at, self._dirty = head, read_at, False
        self._due_at = read_at + (head - now) / 1000 if head is not None else 0.0
        return head

    async def tick(self, now_ms: int | None) -> int | None:
        """Fire what is due; return the earliest next fire (or now, if catch-up remains).
        A pass before the next known fire, with no change announced, costs nothing; else
        one round trip when nothing is due. A rule still due after a pass (an outage of over
        MAX_SLOTS_PER_PASS slots) is passed again at once, before the dispatcher moves any
        run: its outage is judged as at one instant (up to PASSES_PER_TICK passes)."""
        head = await self._pass(now_ms)
        for _ in range(PASSES_PER_TICK - 1):
            if head is None or head > self._now:
                break
            head = await self._pass(now_ms)
        return head

    async def _pass(self, now_ms: int | None) -> int | None:
        if self._still_known(now_ms):
            await self._maybe_audit()
            return self._known
        k = self.ctx.keys
        read_at = time.monotonic()
        # A cluster pipeline refuses keyless commands such as TIME: read it on its own there.
        cluster = is_cluster(self.redis)
        pipe = self.redis.pipeline(transaction=False)
        if not cluster:
            pipe.time()
        bad = list(self._unreadable)
        # Past the unreadable ones, so that as many readable rules are seen as without them.
        pipe.zrange(k.rule_next, 0, self.rules_per_pass - 1 + len(bad), withscores=True)
        pipe.zrange(k.rule_catchup, 0, self.rules_per_pass - 1)
        if bad:  # three commands more in the same round trip, only while a rule is unreadable
            pipe.hmget(k.rules, bad)
            pipe.hmget(k.rule_state, bad)
            pipe.zmscore(k.rule_next, bad)
        replies = await pipe.execute()
        t = await self.redis.time() if cluster else replies.pop(0)
        heads, catchup = replies[:2]
        if bad:
            self._recheck(bad, *replies[2:])
        now = self._now = now_ms if now_ms is not None else time_reply_ms(t)
        skip = self._unreadable
        if skip:
            heads = [(m, sc) for m, sc in heads if text(m) not in skip]
        due = {text(m): int(sc) for m, sc in heads if int(sc) <= now}
        waiting = [text(m) for m in catchup]
        ids = list(dict.fromkeys([*due, *(sid for sid in waiting if sid not in skip)]))
        await self._maybe_audit()
        if not ids:
            return self._learn(int(heads[0][1]) if heads else None, now, read_at)
        # The backlog only when something fires: an idle pass's read is one command less.
        backlog = await self.redis.xlen(k.ready)
        budget = int(self.catch_up_budget * max(0.0, 1 - backlog / max(1, self.max_backlog)))
        self.blocked = 0
        await self._fire(ids, now, budget)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrange(k.rule_next, 0, len(self._unreadable), withscores=True)
        pipe.zcard(k.rule_catchup)
        nxt, more = await pipe.execute()
        if skip:
            nxt = [(m, sc) for m, sc in nxt if text(m) not in skip]
            # An unreadable rule's catch-up waits for its spec to change, not the next pass.
            more = max(0, more - sum(1 for sid in waiting if sid in skip))
        head = int(nxt[0][1]) if nxt else None
        if more:  # catch-up left to drain under the budget: come back soon, not at once
            # Replays that only wait for a run to end: unlease publishes when it does.
            pause = CATCH_UP_BLOCKED_MS if self.blocked >= more else CATCH_UP_PAUSE_MS
            soon = now + pause
            head = min(head, soon) if head is not None else soon
        return self._learn(head, now, read_at)

    async def _maybe_audit(self) -> None:
        """Every minute, recount slots without an outcome (a hung replica shows up here)."""
        if time.monotonic() < self._next_audit:
            return
        self._next_audit = time.monotonic() + self.audit_every_s
        from zsched.rules.audit import audit

        try:
            results = await asyncio.to_thread(audit, self.ctx)
        except Exception:  # noqa: BLE001 - the audit must never stop dispatching
            log.exception("ledger audit failed", extra={"queue": self.ctx.queue})
            return
        for r in results:
            if r.unreadable:  # told by the pass that met it (_set_unreadable), not audited
                continue
            self.ctx.metrics.unaccounted_slots.labels(self.ctx.queue, r.schedule_id).set(
                len(r.unaccounted)
            )

    async def _fire(self, ids: list[str], now: int, budget: int) -> None:
        k = self.ctx.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(k.rules, ids)
        pipe.hmget(k.rule_state, ids)
        pipe.zmscore(k.rule_next, ids)
        for sid in ids:
            pipe.get(k.lease(sid))
        specs, states, nexts, *holders = await pipe.execute()
        free = await self._leases_free(ids, holders)
        for sid, raw_spec, raw_state, nxt in zip(ids, specs, states, nexts, strict=True):
            if raw_spec is None:
                if nxt is not None:  # else removed since this pass read it: nothing to tell
                    self._set_unreadable(sid, (None, None), "it has a next fire but no stored "
                                         "spec")  # fmt: skip
                continue
            try:
                spec = decode_spec(raw_spec)
            except RuleError as exc:
                # Its state not watched: a newer zsched firing it changes that at every fire.
                self._set_unreadable(sid, (raw_spec, None), str(exc))
                continue
            try:
                state = decode_state(raw_state)
            except RuleError as exc:
                self._set_unreadable(sid, (raw_spec, raw_state), str(exc))
                continue
            next_ms = int(nxt) if nxt is not None else None
            fire_now = next_ms if next_ms is not None and next_ms <= now else None
            p = plan(spec, state, fire_now, now, budget, free[sid])
            if p.state.backlog and not p.budget_used and not free[sid]:
                self.blocked += 1
            # Not due, only draining catch-up: the next fire stays as it is.
            new_next = p.new_next if fire_now is not None else next_ms
            args = fire_args(spec, raw_spec, raw_state or b"", next_ms, new_next, p, now)
            r = await self.scripts.run(
                ledger.fire(k, args, now_ms=self.ctx.clock.now_ms(),
                            dedupe_window_ms=self.ctx.settings.dedupe_window_ms, trim=True)
            )  # fmt: skip
            if not r.ok:
                self.conflicts += 1
                continue
            budget -= p.budget_used
            self._count(spec, p, r)

    def _set_unreadable(self, sid: str, raw: tuple[bytes | None, bytes | None], why: str) -> None:
        """Leave rule `sid` out until its spec or state changes; say so once per (spec, state)
        (a change that is still unreadable is said again). The rule stays stored as it is: a
        newer zsched may have written it, and it fires again once it is rewritten in a form
        this one reads."""
        if sid in self._unreadable and self._unreadable[sid] == raw:
            return
        self._unreadable[sid] = raw
        log.error("rule %s cannot be read, so it does not fire until it is rewritten "
                  "(the other rules fire as usual): %s", sid, why,
                  extra={"queue": self.ctx.queue, "schedule_id": sid})  # fmt: skip
        self.ctx.metrics.unreadable_rules.labels(self.ctx.queue, sid).set(1)

    def _recheck(self, bad: list[str], raws: list[Any], states: list[Any], scores: list[Any]
                 ) -> None:  # fmt: skip
        """Take back the unreadable rules whose spec or state changed or which have no next
        fire any more (removed): this pass reads them like any other."""
        for sid, raw, state, score in zip(bad, raws, states, scores, strict=True):
            held = self._unreadable[sid]
            if score is None or (raw, state if held[1] is not None else None) != held:
                del self._unreadable[sid]
                self.ctx.metrics.unreadable_rules.labels(self.ctx.queue, sid).set(0)

    async def _leases_free(self, ids: list[str], holders: list[Any]) -> dict[str, bool]:
        """Whether each rule's overlap lease is free: no key, or its run is no longer live."""
        held = [(sid, h) for sid, h in zip(ids, holders, strict=True) if h is not None]
        free = {sid: True for sid in ids}
        if held:
            pipe = self.redis.pipeline(transaction=False)
            for _, h in held:
                pipe.hexists(self.ctx.keys.runs, h)
            for (sid, _), live in zip(held, await pipe.execute(), strict=True):
                free[sid] = not live
        return free

    def _count(self, spec: Spec, p: Plan, r: S.FireResult) -> None:
        m, q, sid = self.ctx.metrics, self.ctx.queue, spec.schedule_id
        if r.fired:
            m.fires.labels(q, sid).inc(r.fired)
        if p.missed:
            m.missed_slots.labels(q, sid, str(spec.misfire)).inc(p.missed)
        if r.overlap_skipped:
            m.overlap_skips.labels(q, sid).inc(r.overlap_skipped)
        if r.duplicates:
            m.duplicates.labels(q, "fire").inc(r.duplicates)
