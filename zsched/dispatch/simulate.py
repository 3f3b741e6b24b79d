"""The policy simulator: what a rule's policies would do over an outage, slot by slot.

It copies the rule into a private in-memory Redis (fakeredis, running the very same Lua
scripts) and drives the real dispatcher code with an injected clock: down from FROM to TO,
then up again, with runs that take `slow_runs` seconds. Live state is only read, never written.
The rule is simulated as it is: a paused rule fires nothing, and its slots are recorded
`skipped: paused` as its resume would record them (`as_resumed=True`: as if it were resumed
before FROM). It starts fresh at FROM otherwise: no run of it live, no catch-up backlog.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, replace
from typing import Any

from zsched.clock import FakeClock
from zsched.context import QueueContext
from zsched.dispatch.dispatcher import Dispatcher
from zsched.errors import ConfigError
from zsched.observability.metrics import Metrics
from zsched.protocol.envelope import decode
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.rules.ledger import history
from zsched.rules.ops import load, resume
from zsched.rules.spec import State
from zsched.rules.triggers import slot_run_id
from zsched.store import scripts as S
from zsched.store.delayed import leaf_number
from zsched.store.replies import entry_payload
from zsched.worker.recovery import ensure_group

#: Dispatch rounds at one instant (each finished run may start one waiting fire).
MAX_ROUNDS_PER_STEP = 100
#: Slots shown after the outage, so its aftermath (catch-up, queued overlap) is visible.
SLOTS_AFTER = 5


@dataclass(frozen=True)
class SimRow:
    slot_ms: int
    outcome: str
    reason: str
    run_id: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def simulate(
    ctx: QueueContext, schedule_id: str, down_from_ms: int, down_to_ms: int,
    slow_runs_s: float | None = None, after_slots: int = SLOTS_AFTER, as_resumed: bool = False,
) -> list[SimRow]:  # fmt: skip
    """The ledger the rule would write: dispatcher down over [from, to), up before and after.
    A paused rule stays paused (every slot `skipped: paused`) unless `as_resumed`."""
    spec, state, raw_spec, _, _ = load(ctx, schedule_id)
    pause = None
    if spec.paused:
        spec = replace(spec, paused=False)
        raw_spec = spec.encode()
        if not as_resumed:
            pause = state
    return asyncio.run(
        _run(ctx, spec, raw_spec, down_from_ms, down_to_ms, slow_runs_s, after_slots, pause)
    )


def fakeredis_module() -> Any:
    """fakeredis (the `zsched[testing]` extra), or a ConfigError saying which extra installs it."""
    try:
        import fakeredis
    except ImportError as exc:
        raise ConfigError("this needs fakeredis with Lua: pip install 'zsched[testing]'") from exc
    return fakeredis


async def _run(
    ctx: QueueContext, spec: Any, raw_spec: bytes, down_from: int, down_to: int,
    slow_s: float | None, after_slots: int, pause: State | None = None,
) -> list[SimRow]:  # fmt: skip
    fakeredis = fakeredis_module()
    server = fakeredis.FakeServer()
    clock = FakeClock(down_from)
    sim = QueueContext(fakeredis.FakeRedis(server=server, protocol=2), ctx.queue,
                       QueueKeys(ctx.queue), ctx.settings, clock, Metrics())  # fmt: skip
    sid = spec.schedule_id
    first = spec.first_slot_after(down_from - 1)
    end = down_to
    for _ in range(after_slots):
        nxt = spec.first_slot_after(end)
        if nxt is None:
            break
        end = nxt
    if pause is not None:
        # Paused since FROM, with the live rule's note: the real resume, after the last slot
        # shown, records each slot of the window `skipped: paused` (nothing else happens).
        paused = State(created_ms=down_from, paused_at_ms=first, paused_ms=down_from,
                       pause_note=pause.pause_note, paused_by=pause.paused_by)  # fmt: skip
        sim.scripts.run(S.schedule(sim.keys, sid, replace(spec, paused=True).encode(), None,
                                   paused.encode()))  # fmt: skip
        clock.set(end)
        resume(sim, sid)
        return _paused_rows(sim, spec)
    sim.scripts.run(
        S.schedule(sim.keys, sid, raw_spec, first, State(created_ms=down_from).encode())
    )
    driver = Driver(sim, fakeredis.FakeAsyncRedis(server=server, protocol=2), clock, slow_s)
    await driver.run_until(down_to, end)
    await driver.close()
    return ledger_rows(sim, sid)


def ledger_rows(ctx: QueueContext, sid: str) -> list[SimRow]:
    rows = sorted(
        history(ctx.redis, ctx.keys, sid, 10**6), key=lambda h: (h["slot_ms"], h["at_ms"])
    )
    return [SimRow(h["slot_ms"], h["outcome"], h["reason"], h["run_id"]) for h in rows]


def _paused_rows(ctx: QueueContext, spec: Any) -> list[SimRow]:
    """The ledger of a paused rule's resume, one row per slot as the other simulations have
    (a pause over 1,000 slots is one range entry in the ledger)."""
    sid, out = spec.schedule_id, []
    for h in history(ctx.redis, ctx.keys, sid, 10**6):
        slots = spec.trigger.slots_between(h["slot_ms"] - 1, h["last_ms"], 2**62)
        out += [SimRow(s, h["outcome"], h["reason"], slot_run_id(sid, s)) for s in slots]
    return sorted(out, key=lambda r: r.slot_ms)


class Driver:
    """Drives a real Dispatcher with an injected clock, and stands in for workers whose runs
    take `slow_s` seconds of simulated time (acked, and their rule lease freed, when done)."""

    def __init__(
        self, ctx: QueueContext, aredis: Any, clock: FakeClock, slow_s: float | None
    ) -> None:
        self.ctx, self.redis, self.clock = ctx, aredis, clock
        self.slow_ms = int((slow_s or 0) * 1000)
        self.dispatcher = Dispatcher(ctx, redis=aredis)
        self.scripts = S.AsyncScripts(aredis)
        self.running: dict[str, tuple[int, str, str, int | None]] = {}
        self.started: list[tuple[str, int, int]] = []  # (run_id, start_ms, finish_ms)
        self._group = False

    async def step(self, t: int) -> None:
        """Everything that happens at instant `t`: finish runs, dispatch, start runs; again
        while a finished run started a fire that waited for it (unlease wakes the real
        dispatchers at once: that fire runs now, not at the next slot), or while the pass
        left work due at `t` (an outage of over 1,000 slots: run() passes again at once)."""
        self.clock.set(t)
        await self._finish(t)
        for _ in range(MAX_ROUNDS_PER_STEP):
            r = await self.dispatcher.tick()
            await self._start_ready(t)
            woke = await self._finish(t)
            due_now = r.more or (r.next_due_ms is not None and r.next_due_ms <= t)
            if not (woke or due_now):
                break

    async def _start_ready(self, t: int) -> None:
        k = self.ctx.keys
        if not self._group:
            self._group = True
            await ensure_group(self.redis, k)
        rows = await self.redis.xreadgroup(GROUP, "sim", {k.ready: ">"}, count=1000)
        for _, entries in rows or []:
            for eid, f in entries:
                env = decode(entry_payload(f)[0], f[b"run_id"].decode())
                finish = t + self.slow_ms
                self.running[eid.decode()] = (finish, env.run_id, env.schedule_id or "",
                                              env.lease_ms)  # fmt: skip
                self.started.append((env.run_id, t, finish))

    async def run_until(self, start: int, end: int) -> None:
        t = start
        while t <= end:
            await self.step(t)
            t = await self._next_event(t)

    async def _finish(self, t: int) -> bool:
        """Finish the runs due to end by `t`; True if one freed its rule's lease (which wakes
        the dispatchers: a fire or a replay may wait for it)."""
        k = self.ctx.keys
        started = False
        for eid, (finish, run_id, sid, lease_ms) in sorted(self.running.items(),
                                                           key=lambda x: x[1][0]):  # fmt: skip
            if finish > t:
                continue
            del self.running[eid]
            window = self.ctx.settings.dedupe_window_ms
            await self.scripts.run(S.ack(k, "sim", [(eid, run_id)], now_ms=t,
                                         dedupe_window_ms=window))  # fmt: skip
            if lease_ms:
                await self.scripts.run(S.unlease(k, sid, run_id, lease_ms, now_ms=t,
                                                 dedupe_window_ms=window))  # fmt: skip
                # The lease's end publishes on `wake`: the dispatchers read the rule again at
                # once (a replay may wait for it), as the real ones hear it.
                for part in self.dispatcher.parts:
                    part.invalidate()
                started = True
        return started

    async def _next_event(self, t: int) -> int:
        k = self.ctx.keys
        candidates = [f for f, *_ in self.running.values()]
        head = await self.redis.zrange(k.rule_next, 0, 0, withscores=True)
        if head:
            candidates.append(int(head[0][1]))
        first = await self.redis.zrange(k.delayed_index, 0, 0)
        if first:  # the delayed set's earliest run: the first run of its first leaf
            leaf = k.delayed_leaf(leaf_number(first[0]))
            head = await self.redis.zrange(leaf, 0, 0, withscores=True)
            candidates.append(int(head[0][1]))
        if await self.redis.zcard(k.rule_catchup):
            # Replays that wait for a run to end go on when it ends (a candidate already).
            blocked = any(getattr(p, "blocked", 0) for p in self.dispatcher.parts)
            if not (blocked and self.running):
                candidates.append(t + (1000 if blocked else 20))
        later = [c for c in candidates if c > t]
        return min(later) if later else t + 10**15

    async def close(self) -> None:
        await self.dispatcher.close()
