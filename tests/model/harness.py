"""Drive the model and the real system through the same operations, and compare them slot by
slot after each one; check the ledger invariants on the real system."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import zsched
from tests.model.completeness import DueSlots
from tests.model.real_system import RealSystem
from tests.model.rule_model import Fate, Model, RuleDef
from zsched.observability.metrics import Metrics
from zsched.rules.audit import audit


class Backend:
    """A sync and an asyncio client on real Redis or fakeredis, as tests/conftest.py's
    Backend (whose module name `conftest` is ambiguous in a whole-suite run)."""

    def __init__(self, url: str | None) -> None:
        import redis

        self.url = url
        if url:
            self.sync: Any = redis.Redis.from_url(url, protocol=2)
        else:
            import fakeredis

            self.server = fakeredis.FakeServer()
            self.sync = fakeredis.FakeRedis(server=self.server, protocol=2)

    def async_client(self) -> Any:
        if self.url:
            import redis.asyncio as aioredis

            return aioredis.Redis.from_url(self.url, protocol=2)
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=self.server, protocol=2)

    def app(self, queue: str, **kw: Any) -> zsched.App:
        kw.setdefault("metrics", Metrics())
        return zsched.App(self.sync, queue=queue, **kw)


def fate_table(table: Sequence[Fate]) -> Any:
    """A fate per (run id, attempt), the same in the model and the real system: a retry on a
    first attempt, then success; but one run id in four whose first attempt retries keeps
    that fate on every attempt, to a dead letter at max_attempts (rule_model.MAX_ATTEMPTS)."""

    def fate_of(rid: str, attempt: int) -> Fate:
        first = table[zlib.crc32(f"{rid}|1".encode()) % len(table)]
        if first.kind == "retry" and zlib.crc32(f"{rid}|exhaust".encode()) % 4 == 0:
            return first
        f = table[zlib.crc32(f"{rid}|{attempt}".encode()) % len(table)]
        if attempt > 1 and f.kind == "retry":
            return replace(f, kind="ok")
        return f

    return fate_of


class Pair:
    """One model and one real system of the same rule."""

    def __init__(self, real: Any, queue: str, rule: RuleDef, table: Sequence[Fate], start: int,
                 dispatchers: int = 1, workers: int = 1) -> None:  # fmt: skip
        self.fate_of = table if callable(table) else fate_table(table)
        self.model = Model(rule, self.fate_of, now=start)
        self.system = RealSystem(real, queue, rule, self.fate_of, start, dispatchers, workers)
        self.steps: list[str] = []
        #: Instants of manual fires (their ledger records are not a slot's outcome).
        self.manual_at: list[int] = []
        #: Runs live when the policy last became skip or queue: started under allow, they may
        #: run beside the rule's next run until they end (each instant is judged by the
        #: policy in force then, not by a flag that an edit to allow turns off for good).
        self.started_under_allow: set[str] = set()
        #: Instants of edits: fires on either side of one need not keep slot order.
        self.edits_at: list[int] = []
        #: Which slots are due, from the operations alone (the completeness check).
        self.due: DueSlots | None = None

    async def start(self, paused: bool = False) -> None:
        await self.system.start()
        self.model.create(paused)
        self.due = DueSlots(self.model.rule.trigger, self.model.now, paused)
        await self.system.create(paused)
        self.steps.append(f"create(paused={paused})")
        self.check()

    async def do(self, op: str, *args: Any) -> None:
        if op == "advance_to":
            return await self._advance(*args)
        self.steps.append(f"{op}{args!r}")
        if op == "run_now":
            self.manual_at.append(self.model.now)
        getattr(self.model, op)(*args)
        await getattr(self.system, op)(*args)
        if self.due is not None:
            self.due.on(op, self.model.now, *args)
        self.check()

    async def kill_worker(self, index: int = 0) -> None:
        """Worker `index` dies mid-run: the model restarts the attempts it was running (which
        worker runs what is the real system's scheduling, not a rule's semantics)."""
        self.steps.append(f"kill_worker({index})")
        self.model.kill_worker(self.system.held_by(index))
        await self.system.kill_worker(index)
        self.check()

    async def edit(self, declared: bool = False, **changes: Any) -> None:
        self.steps.append(f"edit(declared={declared}, **{changes!r})")
        if self.model.rule.overlap == "allow" and changes.get("overlap", "allow") != "allow":
            self.started_under_allow = set(self.system.live())
        self.edits_at.append(self.model.now)
        self.model.edit(**changes)
        if self.due is not None:
            self.due.edit(self.model.now, self.model.rule.trigger)
        await self.system.edit(self.model.rule, declared)
        self.check()

    async def _advance(self, t: int) -> None:
        """Through every event instant of either side, comparing them at each."""
        self.steps.append(f"advance_to({t})")
        while True:
            events = [e for e in (self.model.next_event(), await self.system.next_event())
                      if e is not None]  # fmt: skip
            e = min(events) if events else None
            if e is None or e > t:
                break
            self.model.advance_to(e)
            await self.system.advance_to(e)
            self.check(audit=False)  # the audit at the step's end
        self.model.advance_to(t)
        await self.system.advance_to(t)
        self.check()

    def check(self, audit: bool = True) -> None:
        m, s = self.model, self.system
        where = f"at {s.clock.now_ms()} after {self.steps}"
        got = s.ledger()
        want = sorted((slot, o, r) for slot, o, r, _ in m.ledger)
        assert got == want, f"ledger differs {where}:\n real  {got}\n model {want}"
        assert s.live() == m.live(), (
            f"live runs differ {where}: {s.live()} != {m.live()}\n real started {s.started}"
            f"\n model started {m.started}\n gates {s.gates}"
        )
        if m.rule.overlap != "allow":
            held = m.lease if m._lease_held() else None
            real_lease = s.lease()
            if real_lease is not None and real_lease not in s.live():
                real_lease = None  # stale: freed at the next fire
            assert real_lease == held, f"lease differs {where}: {real_lease} != {held}"
            assert s.waiting() == (m.waiting is not None), f"waiting fire differs {where}"
        self.invariants(where, audit)
        if audit:  # at the step's end: a hole inside a step stays to its end
            self.complete(where)

    def invariants(self, where: str, audited: bool = True) -> None:
        """The issue's ledger invariants, on the real system."""
        s, rule = self.system, self.model.rule
        # A backfill adds a record (and a run, without a lease) to a slot that has one; a
        # manual fire is recorded at its instant, which may be a slot's.
        slots = Counter(slot for slot, o, _ in s.ledger() if o != "backfilled")
        slots.subtract(self.manual_at)
        assert all(n <= 1 for n in slots.values()), f"a slot has two outcomes {where}"
        # A manual fire is not a slot: run now again at the same instant after its run went
        # dead, and it runs again (the model says so too).
        fired = Counter(rid for rid, attempt, _ in s.started
                        if attempt == 1 and "@manual:" not in rid)  # fmt: skip
        assert all(n == 1 for n in fired.values()), f"a slot fired twice {where}"
        if rule.overlap != "allow":
            live = s.live() - self.model.backfilled - self.model.forced - self.started_under_allow
            assert len(live) <= 1, f"{len(live)} live runs under overlap={rule.overlap} {where}"
        self._in_slot_order(where)
        if audited and s.up and not self.model.paused and not self.model.removed:
            (report,) = audit(s.app, now_ms=s.clock.now_ms())
            assert report.unaccounted == [], f"unaccounted slots {report.unaccounted} {where}"

    def caught_up(self) -> bool:
        """Dispatchers up and caught up, from what the harness knows: up, none of them due to
        pass again now (its last pass left no work, its timer is later, no wake-up unheard),
        and the rule's stored next fire in rule_next, if any, later than now."""
        s = self.system
        now = s.clock.now_ms()
        if not (s.up and self.model.up) or any(r.due(now) for r in s.racers):
            return False
        head = s.real.sync.zrange(s.app.keys.rule_next, 0, 0, withscores=True)
        return not head or int(head[0][1]) > now

    def complete(self, where: str) -> None:
        """Every due slot has exactly one outcome, judged from the operations and the slot
        enumerator alone (completeness.py): on the model's ledger, which the real one equals."""
        if self.due is None:
            return
        m = self.model
        bad = self.due.problems(m.ledger, m.backlog, m.now, self.caught_up())
        assert not bad, f"ledger incomplete {where}:\n  " + "\n  ".join(bad[:20])

    def _in_slot_order(self, where: str) -> None:
        """Jitter never reorders fires (docs/policies.md): the runs recorded `ran` start in
        slot order (first attempts; replays and coalesced runs are `ran_late`, backfilled and
        manual runs are not the rule's fires), unless an edit came between their slots."""
        m, ran = self.model, {slot for slot, o, _ in self.system.ledger() if o == "ran"}
        first: dict[int, int] = {}
        for rid, attempt, t in self.system.started:
            run = m.runs.get(rid)
            mine = run is not None and "@manual:" not in rid and rid not in m.backfilled
            if mine and attempt == 1 and run.slot in ran:
                first.setdefault(run.slot, t)
        starts = sorted(first.items())
        for (a, ta), (b, tb) in zip(starts, starts[1:], strict=False):
            if not any(a < e <= b for e in self.edits_at):
                assert ta <= tb, f"slot {b} started at {tb}, before slot {a} at {ta} {where}"

    async def quiet(self, period: int) -> None:
        """Dispatchers up, the rule resumed, time enough for every run and retry to end: the
        two still agree and the audit finds nothing unaccounted for."""
        if not self.model.up:
            await self.do("set_up", True)
        if self.model.queue_paused:
            await self.do("resume_queue")
        if self.model.paused and not self.model.removed:
            await self.do("resume")
        await self.do("advance_to", self.model.now + 12 * period)
        for report in audit(self.system.app, now_ms=self.system.clock.now_ms()):
            assert report.unaccounted == [], f"unaccounted after quiet: {report.unaccounted}"

    async def close(self) -> None:
        await self.system.close()
