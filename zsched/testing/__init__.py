"""zsched.testing: test code that enqueues and code that handles runs, on the real code path.

`Kit` runs the same Lua scripts, the same Dispatcher and the same Worker as production, on
fakeredis (with Lua; `pip install 'zsched[testing]'`) or on a real redis-server URL, with a
`FakeClock`: time moves only when the test says so, and hours pass in microseconds. There is
no eager mode and no other code path. docs/testing.md shows it; the pytest plugin
(zsched.testing.plugin, registered as a pytest11 entry point) provides fixtures.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from zsched.app import App, AsyncApp
from zsched.clock import FakeClock, datetime_to_ms, ms_to_datetime
from zsched.dispatch.simulate import fakeredis_module
from zsched.errors import InvalidArgument, PayloadError, ZschedError
from zsched.observability.metrics import Metrics
from zsched.protocol.envelope import Payload, decode
from zsched.runs.status import DeadLetter, is_entry_id, stream_entry
from zsched.store.delayed import leaf_number, untag
from zsched.store.replies import entry_payload

__all__ = ["FakeClock", "Kit", "Outcome", "QueuedRun", "fakeredis_module"]

#: Dispatcher passes advance() makes at most, so a rule that fires every millisecond over a
#: year ends with an error instead of hanging the test.
MAX_STEPS = 100_000
_kits = itertools.count(1)


@dataclass(frozen=True)
class QueuedRun:
    """A run waiting in the queue (delayed, or ready on the stream)."""

    run_id: str
    task: str
    payload: Payload
    run_at: datetime
    attempt: int
    schedule_id: str | None
    #: "scheduled" (not due yet) or "ready" (dispatched, waiting for a worker).
    state: str


@dataclass(frozen=True)
class Outcome:
    """What one delivery of a run did: "done", "retried" (a later attempt is scheduled) or
    "dead" (with the dead-letter reason)."""

    run_id: str
    task: str
    attempt: int
    outcome: str
    reason: str = ""


def _ms(value: timedelta | float) -> int:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise InvalidArgument(f"advance() moves time forward only, got {value!r}", "by")
    return int(round(seconds * 1000))


class Kit:
    """An App wired to a private Redis and a FakeClock, with helpers to move time and run.

    `Kit(app)` points `app` itself (its tasks, rules declared in code, settings) at the kit's
    Redis and clock until `close()`, so the code under test keeps using its own App (or its
    own AsyncApp: `Kit(aio)`; `app.aio()` inside the kit reaches the kit too); `Kit()` makes
    a fresh App (`kit.app`). `redis_url`: a real redis-server instead of fakeredis.
    `start`: the clock's first instant (an aware datetime; default: now).
    """

    def __init__(
        self,
        app: App | AsyncApp | None = None,
        *,
        start: datetime | None = None,
        redis_url: str | None = None,
        queue: str | None = None,
    ) -> None:
        if start is not None and start.utcoffset() is None:
            raise InvalidArgument(f"start must be an aware datetime, got {start!r}", "start")
        moment = start or datetime.now(UTC)
        self.clock = FakeClock(datetime_to_ms(moment))
        self._redis_url = redis_url
        self._server: Any = None
        sync = self._sync_client()
        self._saved: dict[str, Any] | None = None
        self._aio: Any = None
        if isinstance(app, AsyncApp):
            self._aio, app = app, app.app
        if app is None:
            app = App(sync, queue or "test", clock=self.clock, metrics=Metrics())
        else:
            self._saved = {k: getattr(app, k) for k in _BOUND}
            _bind(app, sync, self.clock, queue)
        self.app = app
        self._aio_saved: dict[str, Any] | None = None
        if self._aio is not None:
            self._aio_saved = {k: getattr(self._aio, k) for k in _AIO_BOUND}
            _bind_aio(self._aio, self._async_client())
        self._procs: dict[int, tuple[Any, Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.consumer = f"kit-{next(_kits)}"
        if app.declared:
            app.sync_schedules()

    # -- clients --------------------------------------------------------------------------------

    def _sync_client(self) -> Any:
        if self._redis_url is not None:
            from zsched.store.connection import sync_client

            return sync_client(self._redis_url)
        fakeredis = fakeredis_module()
        self._server = fakeredis.FakeServer()
        client = fakeredis.FakeRedis(server=self._server, protocol=2)
        # AsyncApps made from the App while the kit holds it (app.aio()) reach the same data.
        client.zsched_async_client = self._async_client
        return client

    def _async_client(self) -> Any:
        if self._redis_url is not None:
            from zsched.store.connection import async_client

            return async_client(self._redis_url)
        return fakeredis_module().FakeAsyncRedis(server=self._server, protocol=2)

    def _processes(self) -> tuple[Any, Any]:
        # asyncio clients belong to the loop that made them: one dispatcher and worker per loop.
        loop = asyncio.get_running_loop()
        procs = self._procs.get(id(loop))
        if procs is None:
            d = self.app.dispatcher(redis=self._async_client())
            # One run at a time, in stream order: a test sees the same order on every run
            # (a pool of threads ran a drain's sync handlers in any order under load).
            w = self.app.worker(redis=self._async_client(), consumer=self.consumer,
                                concurrency=1)  # fmt: skip
            procs = self._procs[id(loop)] = (d, w)
        return procs

    def _sync(self, coro: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise ZschedError("an event loop is running here: await the kit's a* methods "
                              "(aadvance, adrain, arun_schedule_now)")  # fmt: skip
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    # -- time -----------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The fake clock's instant."""
        return ms_to_datetime(self.clock.now_ms())

    def advance(self, by: timedelta | float) -> int:
        """Move the clock `by` (seconds or a timedelta), stopping at every instant something
        comes due on the way (a delayed run, a rule's slot) and dispatching it there, as a
        dispatcher that never stopped would. Returns the runs dispatched. Runs no handler."""
        return int(self._sync(self.aadvance(by)))

    async def aadvance(self, by: timedelta | float) -> int:
        """advance(), awaited (for async tests)."""
        d, _ = self._processes()
        target = self.clock.now_ms() + _ms(by)
        moved = await _tick(d)
        for _ in range(MAX_STEPS):
            nxt = await self._next_due(d)
            if nxt is None or nxt > target:
                self.clock.set(target)
                return moved + await _tick(d)
            self.clock.set(max(nxt, self.clock.now_ms()))
            moved += await _tick(d)
        raise ZschedError(f"advance() stopped after {MAX_STEPS} steps; advance less at once")

    async def _next_due(self, d: Any) -> int | None:
        """The earliest instant after now at which a rule slot or a delayed run comes due."""
        r, now = d.redis, self.clock.now_ms()
        found: list[int] = []
        for view in self.app.partition_views():
            k = view.keys
            head = await r.zrange(k.rule_next, 0, 0, withscores=True)
            if head:
                found.append(int(head[0][1]))
            first = await r.zrange(k.delayed_index, 0, 0)
            if first:
                leaf = await r.zrange(k.delayed_leaf(leaf_number(first[0])), 0, 0, withscores=True)
                if leaf:
                    found.append(int(leaf[0][1]))
            if await r.zcard(k.rule_catchup):
                found.append(now + 1)  # catch-up replays wait for budget: step on
        later = [f for f in found if f > now]
        return min(later) if later else None

    # -- running --------------------------------------------------------------------------------

    def drain(self, retries: bool = True, max_rounds: int = 100) -> list[Outcome]:
        """Run every ready run through the registered handlers on the real worker path and
        return what each delivery did. With `retries`, the clock then moves to each retry's
        due time and the retry runs too, until nothing ready or retried is left."""
        return list(self._sync(self.adrain(retries, max_rounds)))

    async def adrain(self, retries: bool = True, max_rounds: int = 100) -> list[Outcome]:
        """drain(), awaited (for async tests)."""
        d, w = self._processes()
        out: list[Outcome] = []
        for _ in range(max_rounds):
            await _tick(d)
            ready = await self._ready_runs(w.redis)
            if not ready:
                if not retries:
                    return out
                due = [o for o in out if o.outcome == "retried"]
                nxt = await self._retry_due({o.run_id for o in due})
                if nxt is None:
                    return out
                await self.aadvance(timedelta(milliseconds=max(0, nxt - self.clock.now_ms())))
                continue
            while await w.tick():
                pass
            out.extend([await self._outcome(w.redis, run) for run in ready])
        raise ZschedError(f"drain() did not settle within {max_rounds} rounds")

    async def _ready_runs(self, r: Any) -> list[tuple[str, str, int]]:
        runs = []
        for view in self.app.partition_views():
            for _eid, f in await r.xrange(view.keys.ready):
                run_id = f[b"run_id"].decode()
                try:
                    env = decode(entry_payload(f)[0], run_id)
                    runs.append((run_id, env.task, env.attempt))
                except PayloadError:
                    runs.append((run_id, "?", 0))
        return runs

    async def _outcome(self, r: Any, run: tuple[str, str, int]) -> Outcome:
        from zsched.aio_reads import get_run

        run_id, task, attempt = run
        st = await get_run(r, self.app.keys_for_run(run_id), run_id)
        kind = {"done": "done", "scheduled": "retried", "dead": "dead"}.get(st.state, st.state)
        return Outcome(run_id, task, attempt, kind, st.dead_reason or "")

    async def _retry_due(self, run_ids: set[str]) -> int | None:
        dues = [q.run_at for q in self.enqueued() if q.run_id in run_ids and q.state == "scheduled"]
        return datetime_to_ms(min(dues), floor=True) if dues else None

    def run_schedule_now(self, schedule_id: str, force: bool = False) -> str:
        """Fire the rule once now with the App's own `run_schedule_now` (a manual fire: run id
        `<id>@manual:<instant>`, ledger outcome `manual`, the rule's slots and the clock
        unchanged; the overlap policy holds unless `force`); returns the run id, due now.
        Run it with drain(). Raises ZschedError if nothing was enqueued (overlap skip, or a
        manual fire at this instant already: advance the clock between two)."""
        return str(self._sync(self.arun_schedule_now(schedule_id, force)))

    async def arun_schedule_now(self, schedule_id: str, force: bool = False) -> str:
        """run_schedule_now(), awaited."""
        from zsched.rules.controls import ManualOutcome

        fire = self.app.run_schedule_now(schedule_id, force)  # in-memory or a test server
        why = {
            ManualOutcome.SKIPPED: "its previous run holds the overlap lease (force=True)",
            ManualOutcome.DUPLICATE: "a manual fire at this instant exists: advance the clock",
        }.get(fire.outcome)
        if why is not None:
            raise ZschedError(f"schedule {schedule_id!r} run now: nothing enqueued, {why}")
        return fire.run_id

    # -- readers --------------------------------------------------------------------------------

    def enqueued(self, task: str | None = None) -> list[QueuedRun]:
        """Live runs (delayed or ready), by due time then run id; only `task`'s if given."""
        out = []
        for view in self.app.partition_views():
            r, k = self.app.redis, view.keys
            # A run on the stream is known in `runs` by its entry id, its envelope in the entry
            # (zsched.runs.status.stream_entry; legacy: runs zsched 0.2 dispatched).
            legacy = {a.decode(): e for a, e in r.hgetall(k.legacy_entries).items()}
            if r.type(k.entries) == b"hash":  # still zsched 0.2's: no 0.3 dispatch yet
                legacy.update((a.decode(), e) for a, e in r.hgetall(k.entries).items())
            in_stream = {e: entry_payload(f)[0] for e, f in r.xrange(k.ready)}
            for raw_id, raw in r.hgetall(k.runs).items():
                run_id = raw_id.decode()
                entry = stream_entry(raw, legacy.get(run_id))
                if is_entry_id(raw):
                    raw = in_stream.get(raw) or b""
                due, body = untag(raw)
                env = decode(body, run_id)
                if task is not None and env.task != task:
                    continue
                state = "ready" if entry is not None else "scheduled"
                out.append(QueuedRun(run_id, env.task, env.payload,
                                     ms_to_datetime(due if due is not None else env.run_at_ms),
                                     env.attempt, env.schedule_id, state))  # fmt: skip
        return sorted(out, key=lambda q: (q.run_at, q.run_id))

    def dead_letters(self) -> list[DeadLetter]:
        """The dead-letter stream, oldest first."""
        return self.app.dead_letters(count=10_000)

    def ledger(self, schedule_id: str) -> list[dict[str, Any]]:
        """The rule's ledger, oldest first: slot (aware datetime), outcome, reason, run_id."""
        rows = self.app.schedule_history(schedule_id, count=10_000)
        return [{**h, "slot": ms_to_datetime(h["slot_ms"])} for h in reversed(rows)]

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the kit's processes; give a patched App its own Redis and clock back."""
        if self._loop is not None:
            self._loop.run_until_complete(self._aclose_procs())
            self._loop.close()
            self._loop = None
        self._restore()

    async def aclose(self) -> None:
        """close(), awaited (an async test's kit)."""
        await self._aclose_procs()
        self._restore()

    async def _aclose_procs(self) -> None:
        mine = self._procs.pop(id(asyncio.get_running_loop()), None)
        if mine is not None:
            d, w = mine
            await d.close()
            await w.close()

    def _restore(self) -> None:
        if self._aio_saved is not None:
            for k, v in self._aio_saved.items():
                setattr(self._aio, k, v)
            self._aio_saved = None
        if self._saved is not None:
            for k, v in self._saved.items():
                setattr(self.app, k, v)
            self._saved = None

    def __enter__(self) -> Kit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _tick(d: Any) -> int:
    """One dispatcher pass that reads the rules: in production a rule written anywhere wakes
    the dispatchers (schedule.lua publishes on `wake`); the kit's ticks are its wake-ups."""
    for single in getattr(d, "dispatchers", [d]):
        for part in single.parts:
            if hasattr(part, "invalidate"):
                part.invalidate()
    return _moved(await d.tick())


def _moved(result: Any) -> int:
    # A Dispatcher's tick gives a TickResult, a MultiDispatcher's a list of them.
    return sum(r.moved for r in result) if isinstance(result, list) else int(result.moved)


#: What Kit(app) rebinds on the App it is given, and puts back at close().
_BOUND = ("ctx",)


def _bind(app: App, redis: Any, clock: FakeClock, queue: str | None) -> None:
    from dataclasses import replace

    from zsched.protocol.keys import QueueKeys
    from zsched.store.state import SharedState

    # A fresh shared state: the App's scripts and partition views hold the old client, so
    # they are made again on first use, and the layout is checked again in the kit's Redis.
    changes: dict[str, Any] = {"redis": redis, "url": None, "clock": clock, "shared": SharedState()}
    if queue is not None:
        changes.update(queue=queue, keys=QueueKeys(queue))
    app.ctx = replace(app.ctx, **changes)


#: What Kit(aio) rebinds on an AsyncApp it is given.
_AIO_BOUND = ("redis", "scripts", "_cluster", "_layout_ready", "_owns_client")


def _bind_aio(aio: AsyncApp, redis: Any) -> None:
    from zsched.store.scripts import AsyncScripts

    aio.redis, aio.scripts = redis, AsyncScripts(redis)
    aio._cluster, aio._layout_ready, aio._owns_client = False, False, True  # noqa: SLF001
