"""AsyncApp's enqueue and run controls (mixins, so aio.py stays small): the App's operations
of the same names, arguments and results, awaited.

One-script operations build their call with the App's builder (`App.reschedule_call`,
`App.cancel_call`, `App.enqueue_conflict_call`, `controls.pause`) and await it on the
AsyncApp's scripts. `run_schedule_now` and `pause_schedule` (compare-and-set loops over a
rule's spec and state) run the App's own code in a worker thread. Enqueues ride through a
failover as App.enqueue does (retrying.ride_through_async: the same bound, backoff and logs;
the run id is fixed before the first attempt).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from zsched.control_api import count_conflict, enqueued_id
from zsched.observability import tracing as _tracing
from zsched.protocol.envelope import Payload
from zsched.runs import controls as C
from zsched.runs import enqueue as _enq
from zsched.runs.enqueue import EnqueuedId, EnqueueOptions, Group
from zsched.runs.runinput import check_pause_note
from zsched.store import scripts as S
from zsched.store.retrying import ride_through_async
from zsched.worker.handles import TaskHandle

if TYPE_CHECKING:
    from zsched.app_core import AppCore
    from zsched.config import QueueSettings
    from zsched.rules.controls import ManualFire
    from zsched.runs.status import QueueStatus

T = TypeVar("T")
P = TypeVar("P")
#: Runs validated and packed between two yields to the loop (~1-2 ms of CPU).
BUILD_SLICE = 200
#: replace.lua calls (one run each) sent per round trip by enqueue_many.
CONFLICT_CALLS_PER_TRIP = 100
log = logging.getLogger("zsched.app")  # the App's logger: one outage reads the same


class _Host:
    """What the mixins below use of the AsyncApp they are mixed into (aio.py defines each)."""

    app: AppCore

    if TYPE_CHECKING:

        @property
        def queue(self) -> str: ...
        @property
        def settings(self) -> QueueSettings: ...
        async def run(self, call: S.Call[T]) -> T: ...
        async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...
        async def status(self) -> QueueStatus: ...
        async def _ready(self) -> None: ...
        async def _enqueue_groups(self, groups: list[Group]) -> list[int]: ...
        async def _run_calls(self, calls: list[S.Call[Any]]) -> list[Any]: ...


class AsyncEnqueue(_Host):
    """enqueue and enqueue_many of an AsyncApp."""

    async def ride(self, what: str, call: Callable[[int], Awaitable[T]]) -> T:
        """`await call(attempt)`, retried through a failover or a lost connection for at most
        `settings.outage_retry_ms` (App.ride, awaited); then RedisUnavailable."""
        return await ride_through_async(call, bound_ms=self.settings.outage_retry_ms,
                                        what=what, queue=self.queue, logger=log)  # fmt: skip

    # The overloads take enqueue's keywords as one TypedDict (the implementation spells them,
    # so an unknown keyword is still a TypeError): a handle's payload type is checked.
    @overload
    async def enqueue(
        self, task_name: TaskHandle[P, Any], payload: P, **options: Unpack[EnqueueOptions]
    ) -> EnqueuedId: ...
    @overload
    async def enqueue(
        self, task_name: str, payload: Payload = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueuedId: ...

    async def enqueue(
        self,
        task_name: str | TaskHandle[Any, Any],
        payload: Any = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        run_id: str | None = None,
        on_conflict: str = "keep",
        max_delay: timedelta | float | None = None,
    ) -> EnqueuedId:
        """App.enqueue, awaited (conflict modes, ride-through and all). `task_name` may be a
        task handle (`@app.task`'s return), whose payload type mypy then checks."""
        if isinstance(task_name, TaskHandle):
            task_name = task_name.name
        with _tracing.enqueue_span(self.queue) as span:
            group = self.app.build(task_name, payload, run_at=run_at, delay=delay,
                                  run_id=run_id, trace=span.carrier)  # fmt: skip
            if on_conflict != "keep" or max_delay is not None:
                call = self.app.enqueue_conflict_call(group, on_conflict, max_delay)  # checks
                (rid,) = await self.ride("enqueue", lambda _: self._conflicts([call]))
                return rid
            (code,) = await self.ride("enqueue", lambda _: self._enqueue_groups([group]))
            span.enqueued([group[0]], 0 if code == _enq.ENQUEUED else 1)
        return _enq.enqueued_id(self.app.ctx, group[0], code, run_id is not None)

    async def enqueue_many(
        self, items: Iterable[Mapping[str, Any] | tuple[Any, ...]]
    ) -> list[EnqueuedId]:
        """App.enqueue_many, awaited; validates in slices of BUILD_SLICE runs, yielding to the
        loop between slices, and sends CALLS_PER_TRIP calls per round trip."""
        items = list(items)
        with _tracing.enqueue_span(self.queue, len(items)) as span:
            groups, modes, given = await self._build_items(items, span.carrier)
            if not groups:
                return []
            out: list[EnqueuedId | None] = [None] * len(groups)
            if modes:
                calls = [self.app.enqueue_conflict_call(groups[i], *modes[i]) for i in modes]
                got = await self.ride("enqueue", lambda _: self._conflicts(calls))
                for i, rid in zip(modes, got, strict=True):
                    out[i] = rid
            keep = [i for i in range(len(groups)) if i not in modes]
            plain = [groups[i] for i in keep]
            codes = (
                await self.ride("enqueue", lambda _: self._enqueue_groups(plain)) if plain else []
            )
            span.enqueued([g[0] for g in plain], _enq.duplicates_in(codes))
        return _enq.enqueued_ids(self.app.ctx, out, groups, keep, codes, given)

    async def _build_items(
        self, items: list[Mapping[str, Any] | tuple[Any, ...]], trace: Any
    ) -> tuple[list[Group], dict[int, tuple[str, Any]], list[bool]]:
        """App._build_items, yielding to the loop every BUILD_SLICE runs."""
        groups: list[Group] = []
        modes: dict[int, tuple[str, Any]] = {}
        given: list[bool] = []
        for item in items:
            _enq.build_item(self.app.ctx, item, trace, groups, modes, given)
            if len(groups) % BUILD_SLICE == 0:
                await asyncio.sleep(0)
        return groups, modes, given

    async def _conflicts(self, calls: list[S.Call[C.ReplaceResult]]) -> list[EnqueuedId]:
        """Run replace.lua calls (durably if asked), count their outcomes, their ids."""
        await self._ready()
        out = []
        for j in range(0, len(calls), CONFLICT_CALLS_PER_TRIP):
            for res in await self._run_calls(calls[j : j + CONFLICT_CALLS_PER_TRIP]):
                count_conflict(self.app.ctx, res.outcome)
                out.append(enqueued_id(res))
        return out


class AsyncControls(_Host):
    """Run controls of an AsyncApp: App's ControlMethods and CancelMethods, awaited."""

    async def reschedule(
        self,
        run_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> C.RescheduleResult:
        """App.reschedule, awaited (one script)."""
        return await self.run(self.app.reschedule_call(run_id, run_at=run_at, delay=delay))

    async def cancel(self, run_id: str) -> C.CancelResult:
        """App.cancel, awaited (one script: a rule fire's lease ends in it)."""
        await self._ready()
        res: C.CancelResult = await self.run(self.app.cancel_call(run_id))
        return res

    async def pause_queue(self, note: str | None = None) -> bool:
        """App.pause_queue, awaited (one script per partition)."""
        check_pause_note(note)
        await self._ready()
        now = self.app.clock.now_ms()
        views = self.app.partition_views()
        done: list[bool] = [await self.run(C.pause(v.keys, note, now_ms=now)) for v in views]
        return any(done)

    async def resume_queue(self) -> bool:
        """App.resume_queue, awaited."""
        await self._ready()
        now = self.app.clock.now_ms()
        views = self.app.partition_views()
        done: list[bool] = [await self.run(C.resume(v.keys, now_ms=now)) for v in views]
        return any(done)

    async def drain(
        self,
        timeout: float | None = None,
        progress: Callable[[QueueStatus], Any] | None = None,
        poll: float = 0.5,
    ) -> bool:
        """App.drain, awaited: pause the queue, then poll its status (`await asyncio.sleep`
        between polls, so the loop runs on) until the ready stream is empty (True) or
        `timeout` seconds pass (False). The queue stays paused."""
        await self.pause_queue("drain")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = await self.status()
            if progress is not None:
                progress(st)
            if st.stream_length == 0:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(poll)

    async def run_schedule_now(self, schedule_id: str, force: bool = False) -> ManualFire:
        """App.run_schedule_now (a compare-and-set loop over the rule), in a worker thread."""
        return await self.in_thread(self.app.run_schedule_now, schedule_id, force)

    async def pause_schedule(
        self, schedule_id: str, note: str | None = None, by: str | None = None
    ) -> bool:
        """App.pause_schedule(note=, by=) (a compare-and-set loop), in a worker thread."""
        return await self.in_thread(self.app.pause_schedule, schedule_id, note, by)
