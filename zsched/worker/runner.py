"""`Runner`: executes deliveries with their handlers and decides each run's outcome.

Async handlers run on the event loop, sync ones in a thread pool. A handler's return is an
ack, `Retry` or an error a retry (or a dead letter once attempts are spent), `Fail` a dead
letter; the outcome goes to the Writer's buffer.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from datetime import datetime
from typing import Any

from zsched.clock import ms_to_datetime
from zsched.errors import Fail, PayloadError, Retry, UnknownTask
from zsched.observability import tracing as _tracing
from zsched.observability.metrics import TaskMetrics
from zsched.protocol.envelope import Envelope, decode
from zsched.runs import outcomes as _outcomes
from zsched.worker import admission
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery
from zsched.worker.tasks import RunInfo, Task, run_info, set_current
from zsched.worker.threads import SyncPool
from zsched.worker.writer import OverlapLease, Writer

log = logging.getLogger("zsched.worker.worker")  # one logger for the whole worker
#: Longest retry delay (1000 years): retry.lua refuses a due after 9999-12-31.
MAX_RETRY_DELAY_S = 1000 * 365.25 * 86400


def failure_reason(exc: BaseException, attempts: int) -> str:
    """'failed after N attempts: Type: message (at file:line in func)' — last traceback line."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        f = tb[-1]
        where = f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return f"failed after {attempts} attempt(s): {last}{where}"[:2000]


class Runner:
    """The runs this worker executes: `start(d)` one, `drain()` waits for all."""

    def __init__(self, ctx: WorkerContext, writer: Writer, slot_free: asyncio.Event) -> None:
        self.ctx = ctx
        self.writer = writer
        #: Set when an execution ends (the read loop waits on it).
        self.slot_free = slot_free
        #: entry_id -> the delivery executing (or admitted, not started yet).
        self.running: dict[str, Delivery] = {}
        #: The asyncio tasks executing them.
        self.tasks: set[asyncio.Task[None]] = set()
        #: Deliveries read ahead of the free slots, in stream order: held by this worker
        #: (renewed with the others), started by the read loop as slots free.
        self.waiting: deque[Delivery] = deque()
        #: Run ids whose sync handler outlived its timeout and whose thread still runs: each
        #: holds its slot (`_outlast`); with all of them so, ReadLoop.give_back_stuck.
        self.stuck: list[str] = []
        #: Sync handlers' threads (their results reach the loop in batches: threads.py).
        self.threads = SyncPool(ctx.settings.concurrency, "zsched")
        self.executor = self.threads.executor
        # Per-task metric children: labels() takes a lock and a dict lookup, three times per
        # run on the hot path otherwise.
        self._task_metrics: dict[str, TaskMetrics] = {}
        # The datetimes of RunInfo, remembered for the last instant: the runs of one dispatch
        # call share their stream time, a rule's fires and a batch enqueue often their times.
        self._dispatched, self._scheduled = _LastDatetime(), _LastDatetime()
        #: Whether spans are recorded, looked up at the start of each read pass (`check_tracing`,
        #: ReadLoop.tick, Worker.tick), not twice per run: a provider set later counts from
        #: the next pass.
        self.tracing = _tracing.active()

    def start(self, d: Delivery) -> None:
        """Execute `d` now, up to its first wait, in a context of its own (as a task would):
        a handler that never waits (and its outcome's buffering) is done when this returns,
        without an asyncio task, a loop pass and a callback per run (~1/5 of a no-op run's
        worker time). Only a run that waits gets a task, which goes on from that wait."""
        self.running[d.entry_id] = d
        coro, context = self._execute(d), contextvars.copy_context()
        try:
            waiting = context.run(coro.send, None)
        except StopIteration:
            return
        except asyncio.CancelledError:  # raised by the run itself: a task would end cancelled
            return
        except Exception as exc:  # noqa: BLE001 - what a task would hold as never retrieved
            asyncio.get_running_loop().call_exception_handler(
                {"message": f"run {d.run_id} failed in the worker", "exception": exc})  # fmt: skip
            return
        loop = asyncio.get_running_loop()
        t = d.exec_task = loop.create_task(_Resumed(coro, waiting), context=context)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        """Wait for every started handler (their outcomes are buffered, not written)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def in_threads(self) -> list[Delivery]:
        """The runs whose sync handler a thread still runs (none can be stopped)."""
        return [d for d in self.running.values() if d.thread is not None and d.thread.running()]

    def all_stuck(self) -> bool:
        """Every slot is held by a stuck sync handler: nothing starts here until one returns."""
        return len(self.stuck) >= int(self.ctx.settings.concurrency)

    def observe_metrics(self) -> None:
        """Hand the buffered per-run observations to the metrics (zsched.observability)."""
        for tm in self._task_metrics.values():
            tm.observe()

    def check_tracing(self) -> None:
        """Look up again whether spans are recorded (a provider may have been set since)."""
        self.tracing = _tracing.active()

    # -- executing a run ---------------------------------------------------------------------

    async def _execute(self, d: Delivery) -> None:
        try:
            await self._execute_inner(d)
        except Exception as exc:
            # A fault of the worker itself (a handler's is an outcome): dead-letter the run
            # with the reason rather than leave its entry pending, unrenewed, until reclaim.
            if not self.writer.has_outcome(d.entry_id):
                log.exception("worker error on run %s", d.run_id, extra={"queue": self.ctx.queue})
                self.writer.dead(d, f"worker error: {type(exc).__name__}: {exc}"[:2000],
                                 "worker_error")  # fmt: skip
        finally:
            self.running.pop(d.entry_id, None)
            self.slot_free.set()
            self.writer.wake.set()

    def _prepare(self, d: Delivery) -> tuple[Envelope, Task, RunInfo] | None:
        """Decode the run and find its task; None when it was dead-lettered instead."""
        try:
            env = decode(d.raw, d.run_id)
        except PayloadError as exc:
            self.writer.dead(d, f"undecodable envelope: {exc}", "undecodable")
            return None
        if env.lease_ms and env.schedule_id:
            lease = OverlapLease(env.schedule_id, env.run_id, env.lease_ms)
            self.writer.overlap_leases[d.entry_id] = lease
        task = self.ctx.tasks.get(env.task)
        if task is None:
            self.writer.dead(d, str(UnknownTask.named(env.task)), "unknown_task")
            return None
        stream_ms = d.entry_id.partition("-")[0]
        dispatched = self._dispatched(int(stream_ms)) if stream_ms.isdigit() else None
        info = run_info(env.run_id, env.task, env.attempt, self._scheduled(env.scheduled_ms),
                        self.ctx.queue, env.schedule_id, d.deliveries, dispatched)  # fmt: skip
        d.info, d.is_async, d.task_name = info, task.is_async, task.name
        return env, task, info

    async def _execute_inner(self, d: Delivery) -> None:
        prepared = self._prepare(d)
        if prepared is None:
            return
        env, task, info = prepared
        if d.cancel_seen:  # asked to stop before its handler started
            return self.writer.discard(d, task.name)
        if task.limits is None:
            return await self._run(d, env, task, info)
        if not await admission.admit(self.ctx, self.writer, d, env, task):
            return None  # deferred (or dead: its limit_key failed)
        try:
            await self._run(d, env, task, info)
        finally:
            await admission.vacate(self.ctx, d, task)
        return None

    async def _run(self, d: Delivery, env: Envelope, task: Task, info: RunInfo) -> None:
        """Run the handler and buffer its outcome."""
        started_ms = self.ctx.server_time.now_ms()
        due = d.due_ms if d.due_ms is not None else env.run_at_ms
        tm = self._metrics_of(task.name)
        tm.lags.append(max(0.0, (started_ms - due) / 1000))
        t0 = time.perf_counter()
        set_current(info)  # this task's log lines about the run carry it (observability/logs.py)
        span = (_tracing.start_attempt(env, self.ctx.queue, d.deliveries, d.entry_id, due)
                if self.tracing else None)  # fmt: skip
        value: Any = None
        try:
            value = await self._call(d, task, env, info)
        except asyncio.CancelledError:
            if not d.cancel_seen:  # the worker is shutting down: not a cancel of this run
                raise
            me = asyncio.current_task()
            if me is not None:
                me.uncancel()  # ours: the run goes on to its outcome
            self.writer.discard(d, task.name)
        except Exception as exc:  # noqa: BLE001 - any handler error is an outcome, not a crash
            self._failed(d, env, task, exc)
        else:
            if d.cancel_seen:  # it returned after it was asked to stop
                self.writer.discard(d, task.name)
            else:
                self.writer.acks.append((d.entry_id, d.run_id))
                tm.ok += 1
        finally:
            tm.durations.append(time.perf_counter() - t0)
            if task.keep_result:  # written with the run's outcome, dropped for a retry
                kept = _outcomes.build(env.attempt, time.perf_counter() - t0, value,
                                       task.max_result_bytes)  # fmt: skip
                self.writer.kept[d.entry_id] = (d.run_id, kept.encode())
            if span is not None:
                _tracing.end_attempt(span)

    def _failed(self, d: Delivery, env: Envelope, task: Task, exc: Exception) -> None:
        """A handler raised: a run asked to stop ends cancelled, else it retries or dies."""
        if d.cancel_seen:
            self.writer.discard(d, task.name)
        elif isinstance(exc, Retry):
            self._retry(d, env, task, exc.delay, exc.reason, outcome="retried")
        elif isinstance(exc, Fail):
            self.writer.dead(d, f"failed: {exc.reason}"[:2000], "failed", task.name)
        else:
            if isinstance(exc, TimeoutError):
                if isinstance(exc, _ReturnedLate) and env.attempt < self._attempts(env, task):
                    # Its effect happened, and the retry will run the handler again.
                    self.ctx.metrics.duplicates.labels(self.ctx.queue, "timeout").inc()
                exc = TimeoutError(f"timed out after {task.timeout}s")
            self._retry(d, env, task, None, None, exc=exc)

    def _attempts(self, env: Envelope, task: Task) -> int:
        return env.max_attempts or task.max_attempts or self.ctx.settings.max_attempts

    def _metrics_of(self, task: str) -> TaskMetrics:
        tm = self._task_metrics.get(task)
        if tm is None:
            m, q = self.ctx.metrics, self.ctx.queue
            tm = TaskMetrics(m.completed.labels(q, task, "succeeded"), m.start_lag.labels(q, task),
                              m.run_duration.labels(q, task))  # fmt: skip
            self._task_metrics[task] = tm
        return tm

    async def _call(self, d: Delivery, task: Task, env: Envelope, info: RunInfo) -> Any:
        """Run the handler; its return value."""
        if task.is_async:  # in the run's own context, where _run set the current run
            coro = task.fn(env.payload)
            if task.timeout:
                return await asyncio.wait_for(coro, task.timeout)
            return await coro
        # In a copy of this context: the handler's thread sees the run span (tracing.py).
        run = contextvars.copy_context().run
        if not task.timeout:  # no start to hear of: one wake of the loop per batch of results
            fut, d.thread = self.threads.start(run, _call_sync, task.fn, env.payload, info, None)
            return await fut
        loop = asyncio.get_running_loop()
        began = asyncio.Event()
        fut, d.thread = self.threads.start(run, _call_sync, task.fn, env.payload, info,
                                           lambda: loop.call_soon_threadsafe(began.set))  # fmt: skip
        await began.wait()  # waiting for a thread is not the handler's time
        try:
            return await asyncio.wait_for(asyncio.shield(fut), task.timeout)
        except TimeoutError:
            if await self._outlast(fut, info, task.timeout):
                raise _ReturnedLate() from None
            raise

    async def _outlast(self, fut: asyncio.Future[Any], info: RunInfo, timeout: float) -> bool:
        """A sync handler ran past its timeout. Its thread cannot be stopped: the run stays
        held (renewed) until the thread ends, so its retry cannot start beside it, and the
        lost thread is shown rather than hidden; the attempt then counts as timed out.
        True if the handler returned (did its work) rather than raised."""
        q = self.ctx.queue
        g = self.ctx.metrics.stuck_handlers.labels(q)
        log.warning("run %s: sync handler still running after its %.1fs timeout; its thread "
                    "and run slot stay taken until it returns", info.run_id, timeout,
                    extra={"queue": q, "run_id": info.run_id})  # fmt: skip
        g.inc()
        self.stuck.append(info.run_id)
        if self.all_stuck():
            self.slot_free.set()  # the read loop hands back what waits (give_back_stuck)
        try:
            late = await asyncio.gather(fut, return_exceptions=True)
        finally:
            g.dec()
            self.stuck.remove(info.run_id)
        return not isinstance(late[0], BaseException)

    def _retry(
        self,
        d: Delivery,
        env: Envelope,
        task: Task,
        delay: float | None,
        reason: str | None,
        exc: BaseException | None = None,
        outcome: str = "failed",
    ) -> None:
        s, q, m = self.ctx.settings, self.ctx.queue, self.ctx.metrics
        attempts = self._attempts(env, task)
        if env.attempt >= attempts:
            # "failed after": the dead script counts it as exhausted (lua/dead.lua's kinds).
            why = (failure_reason(exc, env.attempt) if exc
                   else f"failed after {env.attempt} attempt(s): {reason}")  # fmt: skip
            return self.writer.dead(d, why, "exhausted", task.name)
        if delay is None:
            delay = task.backoff_seconds(env.attempt, s.max_backoff_ms / 1000)
        # Retry(delay=) is finite and >= 0 (it checks), but may be longer than the scripts
        # allow (a due after 9999-12-31 refuses the whole retry call): cut there.
        delay_ms = int(min(max(0.0, delay), MAX_RETRY_DELAY_S) * 1000)
        nxt = env.next_attempt(self.ctx.server_time.now_ms() + delay_ms)
        self.writer.retries.append((d.entry_id, d.run_id, delay_ms, nxt.encode()))
        _tracing.event("zsched.retry", failed=exc is not None, delay_s=delay_ms / 1000,
                       reason=str(exc) if exc is not None else reason)  # fmt: skip
        m.completed.labels(q, task.name, outcome).inc()
        m.retried.labels(q, task.name).inc()
        if exc is not None:
            log.info("run %s failed (attempt %d/%d), retrying in %.1fs: %s", d.run_id,
                     env.attempt, attempts, delay, exc, extra={"queue": q, "run_id": d.run_id})  # fmt: skip


class _ReturnedLate(TimeoutError):
    """A sync handler that returned after its timeout: the attempt still counts as timed out
    (and is retried), but its effect happened: the retry is a duplicate execution."""


def _call_sync(fn: Any, payload: Any, info: RunInfo, began: Callable[[], Any] | None) -> Any:
    if began is not None:
        began()
    set_current(info)
    try:
        return fn(payload)
    finally:
        set_current(None)


class _LastDatetime:
    """ms_to_datetime, remembering the last instant (datetimes are immutable: shared)."""

    __slots__ = ("ms", "dt")

    def __init__(self) -> None:
        self.ms, self.dt = 0, ms_to_datetime(0)

    def __call__(self, ms: int) -> datetime:
        if ms != self.ms:
            self.ms, self.dt = ms, ms_to_datetime(ms)
        return self.dt


class _Resumed(Coroutine[Any, Any, None]):
    """A coroutine that `Runner.start` stepped up to its first wait, for a task to drive from
    there: the task's first step gets what it waits on; later sends and throws (a cancel,
    also one before that first step) go to it, as they would have in a task from the start."""

    def __init__(self, coro: Coroutine[Any, Any, None], waiting: Any) -> None:
        self.coro, self.waiting, self.first = coro, waiting, True

    def send(self, value: Any) -> Any:
        if self.first:
            self.first = False
            return self.waiting
        return self.coro.send(value)

    def throw(self, *exc: Any) -> Any:
        self.first = False
        return self.coro.throw(*exc)

    def close(self) -> None:
        self.coro.close()

    def __await__(self) -> Generator[Any, Any, None]:
        raise TypeError("a run resumed by Runner.start is driven by its task, not awaited")
