"""The worker: a consumer in the ready stream's group that runs registered tasks.

Async handlers run on the event loop, sync ones in a thread pool, at most `concurrency` at a
time. Outcomes are buffered and written in batches (one ack script call for many runs). Every
write is fenced: a consumer that no longer owns an entry cannot ack, retry or renew it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import secrets
import socket
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.asyncio.connection
import redis.exceptions

from zsched.clock import ServerTime, ms_to_datetime
from zsched.config import WorkerSettings, settings_from
from zsched.errors import Fail, PayloadError, Retry, UnknownTask
from zsched.observability import tracing as _tracing
from zsched.observability.metrics import TaskMetrics
from zsched.protocol.envelope import Envelope, decode
from zsched.protocol.keys import GROUP
from zsched.protocol.limits import MAX_DURATION_MS
from zsched.protocol.replies import HoldCode
from zsched.protocol.text import lossy_text
from zsched.runs import controls as C
from zsched.runs import outcomes as _outcomes
from zsched.store import scripts as S
from zsched.store.connection import RETRYABLE_ERRORS, async_client, async_from_sync
from zsched.store.eviction import EvictionWatch
from zsched.store.retrying import REFUSALS, Outage
from zsched.worker import limits as _limits
from zsched.worker import recovery
from zsched.worker.loops import WorkerLoop
from zsched.worker.tasks import RunInfo, Task, set_current

if TYPE_CHECKING:
    from zsched.app import App

log = logging.getLogger(__name__)
# Bound once: looking a member up on an Enum class costs ~0.3 us, paid per run otherwise.
_OK, _FENCED = HoldCode.OK, HoldCode.FENCED
#: Outcomes written per script call. An ack of 100 runs holds Redis ~0.6 ms (also while a
#: 300,000-entry stream drains); 1000 (the scripts' bound) took ~6 ms, over the 5 ms a script
#: may hold Redis (BENCHMARKS.md).
FLUSH_BATCH = 100
#: Longest retry delay (1000 years): retry.lua refuses a due after 9999-12-31.
MAX_RETRY_DELAY_S = MAX_DURATION_MS / 1000
_DEFAULT_SOCKET_TIMEOUT = getattr(redis.asyncio.connection, "DEFAULT_SOCKET_TIMEOUT", None)
_FLUSH_ERRORS: tuple[type[Exception], ...] = (*RETRYABLE_ERRORS, *REFUSALS)


@dataclass
class Delivery:
    """One stream entry handed to this worker."""

    entry_id: str
    run_id: str
    raw: bytes
    due_ms: int | None
    deliveries: int = 1
    #: Cancel support (zsched/worker/cancel.py): the asyncio task executing it, its RunInfo,
    #: whether its handler is async, and whether a cancel request was seen.
    exec_task: Any = None
    info: RunInfo | None = None
    is_async: bool = False
    cancel_seen: bool = False
    #: Limits (zsched/worker/limits.py): the task, the run's limit key, whether it holds a share.
    task_name: str | None = None
    limit_key: str | None = None
    limited: bool = False


def _delivery(entry_id: Any, fields: dict[bytes, bytes]) -> Delivery:
    due = fields.get(b"due_ms")
    return Delivery(
        lossy_text(entry_id), lossy_text(fields.get(b"run_id", b"")), fields.get(b"envelope", b""),
        int(due) if due and due.isdigit() else None,
    )  # fmt: skip


def failure_reason(exc: BaseException, attempts: int) -> str:
    """'failed after N attempts: Type: message (at file:line in func)' — last traceback line."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        f = tb[-1]
        where = f" (at {os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return f"failed after {attempts} attempt(s): {last}{where}"[:2000]


class Worker(WorkerLoop):
    """Consumes one queue. `run()` loops until stopped; `tick()` does one non-blocking pass."""

    def __init__(
        self, app: App, redis: Any = None, consumer: str | None = None, **settings: Any
    ) -> None:
        self.app = app
        allow_eviction = bool(settings.pop("allow_eviction", False))  # zsched/store/eviction.py
        self.settings = s = settings_from(WorkerSettings, settings)
        url = app.url

        def make() -> Any:
            return async_client(url) if url else async_from_sync(app.redis)

        self.redis = redis if redis is not None else make()
        # Blocking reads hold their connection; give them their own client.
        self._reader = self.redis if redis is not None else make()
        self._max_block_ms = _max_block_ms(self._reader)
        self.scripts = S.AsyncScripts(self.redis)
        #: The server's clock for start lags and retry due times (invariant 3).
        self.server_time = ServerTime(app.clock)
        self.metrics = app.metrics
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.running: dict[str, Delivery] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._acks: list[tuple[str, str]] = []
        self._retries: list[tuple[str, str, int, bytes]] = []
        self._deads: list[tuple[str, str, str, bytes]] = []
        self._discards: list[tuple[str, str]] = []
        #: entry_id -> (run_id, encoded outcome) of keep_result runs, recorded once written.
        self._kept: dict[str, tuple[str, bytes]] = {}
        self._flushing: set[str] = set()
        self._lost: set[str] = set()
        # Held by flush and by lease renewal: a renewal racing an ack would read the acked
        # entry as lost (and count a fence that never happened).
        self.writing = asyncio.Lock()
        #: entry_id -> (schedule_id, run_id, lease_ms) of held runs that hold a rule's lease.
        self._leases: dict[str, tuple[str, str, int]] = {}
        self._wake_flush = asyncio.Event()
        self._slot_free = asyncio.Event()
        #: The worker's loops wait out a Redis outage together and log it once.
        self.outage = Outage(logging.getLogger("zsched.worker.worker"), "worker", app.queue)
        self.eviction = EvictionWatch(self.redis, app.keys.ready, app.queue, "worker",
                                      app.metrics, allow_eviction)  # fmt: skip
        self._executor = ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="zsched")
        # Per-task metric children: labels() takes a lock and a dict lookup, three times per
        # run on the hot path otherwise.
        self._task_metrics: dict[str, TaskMetrics] = {}
        self._group_ready = False
        self.reclaim_cursor = "0-0"
        self.stopping = False

    # -- bookkeeping used by recovery ----------------------------------------------------------

    def held_entry_ids(self) -> list[str]:
        pending = [a[0] for a in self._acks] + [r[0] for r in self._retries]
        pending += [d[0] for d in self._discards]
        return list(self.running) + pending + [d[0] for d in self._deads] + list(self._flushing)

    def leases(self) -> dict[str, tuple[str, str, int]]:
        return self._leases

    def lost_entries(self) -> set[str]:
        return self._lost

    def mark_lost(self, entry_id: str) -> None:
        if entry_id not in self._lost:
            self._lost.add(entry_id)
            log.warning("lost entry %s: another consumer owns it now", entry_id,
                        extra={"queue": self.app.queue})  # fmt: skip

    # -- one pass ----------------------------------------------------------------------------

    async def setup(self) -> None:
        if not self._group_ready:
            await recovery.ensure_group(self.redis, self.app.keys)
            self._group_ready = True

    async def _read(self, count: int, block_ms: int | None) -> list[Delivery]:
        k = self.app.keys
        if self.server_time.stale():  # once a minute: one TIME round trip
            await self.server_time.ameasure(self.redis)
        self._observe_metrics()  # start lags of long handlers show before they finish
        if block_ms and self._max_block_ms:
            block_ms = min(block_ms, self._max_block_ms)
        try:
            resp = await self._reader.xreadgroup(
                GROUP, self.consumer, {k.ready: ">"}, count=count, block=block_ms
            )
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._group_ready = False
            await self.setup()
            return []
        return [_delivery(eid, f) for _stream, entries in resp or [] for eid, f in entries]

    async def tick(self, count: int | None = None) -> int:
        """Read what is ready now (no blocking), run it all, write the outcomes. Returns count."""
        await self.setup()
        batch = await self._read(count or self.settings.read_batch, None)
        for d in batch:
            self._start(d)
        await self.drain()
        return len(batch)

    async def drain(self) -> None:
        """Wait for every started handler, then write all outcomes."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.flush()

    def _start(self, d: Delivery) -> None:
        self.running[d.entry_id] = d
        t = d.exec_task = asyncio.get_running_loop().create_task(self._execute(d))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # -- executing a run ---------------------------------------------------------------------

    async def _execute(self, d: Delivery) -> None:
        try:
            await self._execute_inner(d)
        except Exception as exc:
            # A fault of the worker itself (a handler's is an outcome): dead-letter the run
            # with the reason rather than leave its entry pending, unrenewed, until reclaim.
            outcomes = (*self._acks, *self._retries, *self._deads, *self._discards)
            if not any(d.entry_id == o[0] for o in outcomes):
                log.exception("worker error on run %s", d.run_id, extra={"queue": self.app.queue})
                self._dead(d, f"worker error: {type(exc).__name__}: {exc}"[:2000], "worker_error")
        finally:
            self.running.pop(d.entry_id, None)
            self._slot_free.set()
            self._wake_flush.set()

    def _prepare(self, d: Delivery) -> tuple[Envelope, Task, RunInfo] | None:
        """Decode the run and find its task; None when it was dead-lettered instead."""
        try:
            env = decode(d.raw, d.run_id)
        except PayloadError as exc:
            self._dead(d, f"undecodable envelope: {exc}", "undecodable")
            return None
        if env.lease_ms and env.schedule_id:
            self._leases[d.entry_id] = (env.schedule_id, env.run_id, env.lease_ms)
        task = self.app.tasks.get(env.task)
        if task is None:  # never run what was not registered: a dead letter, never a crash
            self._dead(d, str(UnknownTask.named(env.task)), "unknown_task")
            return None
        stream_ms = d.entry_id.split("-", 1)[0]
        dispatched = ms_to_datetime(int(stream_ms)) if stream_ms.isdigit() else None
        info = RunInfo(env.run_id, env.task, env.attempt, ms_to_datetime(env.scheduled_ms),
                       self.app.queue, env.schedule_id, d.deliveries, dispatched)  # fmt: skip
        d.info, d.is_async, d.task_name = info, task.is_async, task.name
        return env, task, info

    async def _execute_inner(self, d: Delivery) -> None:
        prepared = self._prepare(d)
        if prepared is None:
            return
        env, task, info = prepared
        if d.cancel_seen:  # asked to stop before its handler started
            return self._discard(d, task.name)
        if task.limits is None:
            return await self._run(d, env, task, info)
        if not await _limits.admit(self, d, env, task):
            return None  # deferred (or dead: its limit_key failed)
        try:
            await self._run(d, env, task, info)
        finally:
            await _limits.vacate(self, d, task)
        return None

    async def _run(self, d: Delivery, env: Envelope, task: Task, info: RunInfo) -> None:
        """Run the handler and buffer its outcome."""
        started_ms = self.server_time.now_ms()
        due = d.due_ms if d.due_ms is not None else env.run_at_ms
        tm = self._metrics_of(task.name)
        tm.lags.append(max(0.0, (started_ms - due) / 1000))
        t0 = time.perf_counter()
        set_current(
            info
        )  # this task's log lines about the run carry it too (zsched/observability/logs.py)
        span = _tracing.start_attempt(env, self.app.queue, d.deliveries, d.entry_id, due)
        value: Any = None
        try:
            value = await self._call(task, env, info)
        except asyncio.CancelledError:
            if not d.cancel_seen:  # the worker is shutting down: not a cancel of this run
                raise
            me = asyncio.current_task()
            if me is not None:
                me.uncancel()  # ours: the run goes on to its outcome
            self._discard(d, task.name)
        except Exception as exc:  # noqa: BLE001 - any handler error is an outcome, not a crash
            self._failed(d, env, task, exc)
        else:
            if d.cancel_seen:  # it returned after it was asked to stop
                self._discard(d, task.name)
            else:
                self._acks.append((d.entry_id, d.run_id))
                tm.succeeded.inc()
        finally:
            tm.durations.append(time.perf_counter() - t0)
            if task.keep_result:  # written with the run's outcome, dropped for a retry
                kept = _outcomes.build(env.attempt, time.perf_counter() - t0, value,
                                       task.max_result_bytes)  # fmt: skip
                self._kept[d.entry_id] = (d.run_id, kept.encode())
            _tracing.end_attempt(span)

    def _failed(self, d: Delivery, env: Envelope, task: Task, exc: Exception) -> None:
        """A handler raised: a run asked to stop ends cancelled, else it retries or dies."""
        if d.cancel_seen:
            self._discard(d, task.name)
        elif isinstance(exc, Retry):
            self._retry(d, env, task, exc.delay, exc.reason, outcome="retried")
        elif isinstance(exc, Fail):
            self._dead(d, f"failed: {exc.reason}"[:2000], "failed", task.name)
        else:
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"timed out after {task.timeout}s")
            self._retry(d, env, task, None, None, exc=exc)

    def _discard(self, d: Delivery, task: str) -> None:
        """The run was asked to stop and did: it ends cancelled (discard.lua at the flush)."""
        self._discards.append((d.entry_id, d.run_id))
        self.metrics.completed.labels(self.app.queue, task, "cancelled").inc()
        log.info("run %s cancelled", d.run_id, extra={"queue": self.app.queue, "run_id": d.run_id})

    def _metrics_of(self, task: str) -> TaskMetrics:
        tm = self._task_metrics.get(task)
        if tm is None:
            m, q = self.metrics, self.app.queue
            tm = TaskMetrics(m.completed.labels(q, task, "succeeded"), m.start_lag.labels(q, task),
                              m.job_duration.labels(q, task))  # fmt: skip
            self._task_metrics[task] = tm
        return tm

    def _observe_metrics(self) -> None:
        for tm in self._task_metrics.values():
            tm.observe()

    async def _call(self, task: Task, env: Envelope, info: RunInfo) -> Any:
        """Run the handler; its return value."""
        if task.is_async:
            set_current(info)
            coro = task.fn(env.payload)
            if task.timeout:
                return await asyncio.wait_for(coro, task.timeout)
            return await coro
        loop = asyncio.get_running_loop()
        began = asyncio.Event()
        # In a copy of this context: the handler's thread sees the run span (zsched/observability/tracing.py).
        fut = loop.run_in_executor(self._executor, contextvars.copy_context().run, _call_sync,
                                   task.fn, env.payload, info,
                                   lambda: loop.call_soon_threadsafe(began.set))  # fmt: skip
        if not task.timeout:
            return await fut
        await began.wait()  # waiting for a thread is not the handler's time
        try:
            return await asyncio.wait_for(asyncio.shield(fut), task.timeout)
        except TimeoutError:
            await self._outlast(fut, info, task.timeout)
            raise

    async def _outlast(self, fut: asyncio.Future[Any], info: RunInfo, timeout: float) -> None:
        """A sync handler ran past its timeout. Its thread cannot be stopped: the run stays
        held (renewed) until the thread ends, so its retry cannot start beside it, and the
        lost thread is shown rather than hidden; the attempt then counts as timed out."""
        q, g = self.app.queue, self.metrics.stuck_handlers.labels(self.app.queue)
        log.warning("run %s: sync handler still running after its %.1fs timeout; its thread "
                    "and run slot stay taken until it returns", info.run_id, timeout,
                    extra={"queue": q, "run_id": info.run_id})  # fmt: skip
        g.inc()
        try:
            await asyncio.gather(fut, return_exceptions=True)
        finally:
            g.dec()

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
        s, q = self.settings, self.app.queue
        attempts = env.max_attempts or task.max_attempts or s.max_attempts
        if env.attempt >= attempts:
            # "failed after": the dead script counts it as exhausted (lua/dead.lua's kinds).
            why = (failure_reason(exc, env.attempt) if exc
                   else f"failed after {env.attempt} attempt(s): {reason}")  # fmt: skip
            return self._dead(d, why, "exhausted", task.name)
        if delay is None:
            delay = task.backoff_seconds(env.attempt, s.max_backoff_ms / 1000)
        # Retry(delay=) is finite and >= 0 (it checks), but may be longer than the scripts
        # allow (a due after 9999-12-31 refuses the whole retry call): cut there.
        delay_ms = int(min(max(0.0, delay), MAX_RETRY_DELAY_S) * 1000)
        nxt = env.next_attempt(self.server_time.now_ms() + delay_ms)
        self._retries.append((d.entry_id, d.run_id, delay_ms, nxt.encode()))
        _tracing.event("zsched.retry", failed=exc is not None, delay_s=delay_ms / 1000,
                       reason=str(exc) if exc is not None else reason)  # fmt: skip
        self.metrics.completed.labels(q, task.name, outcome).inc()
        self.metrics.retried.labels(q, task.name).inc()
        if exc is not None:
            log.info("run %s failed (attempt %d/%d), retrying in %.1fs: %s", d.run_id,
                     env.attempt, attempts, delay, exc, extra={"queue": q, "run_id": d.run_id})  # fmt: skip

    def _dead(self, d: Delivery, reason: str, kind: str, task: str = "") -> None:
        self._deads.append((d.entry_id, d.run_id, reason, d.raw))
        _tracing.event("zsched.dead_letter", failed=True, reason=reason, kind=kind)
        self.metrics.dead_lettered.labels(self.app.queue, kind).inc()
        self.metrics.completed.labels(self.app.queue, task or "-", "dead").inc()
        log.warning("run %s dead-lettered: %s", d.run_id or d.entry_id, reason,
                    extra={"queue": self.app.queue, "run_id": d.run_id})  # fmt: skip

    # -- writing outcomes --------------------------------------------------------------------

    async def flush(self) -> None:
        """Write buffered outcomes (not while leases are renewed: see renew_leases)."""
        self._observe_metrics()
        async with self.writing:
            await self._flush()

    async def _flush(self) -> None:
        """Write buffered outcomes: one script call per kind per FLUSH_BATCH runs."""
        k, now, s = self.app.keys, self.app.clock.now_ms(), self.app.settings
        if self._discards:
            await self._flush_discards()
        while self._acks or self._retries or self._deads:
            b = FLUSH_BATCH
            acks, self._acks = self._acks[:b], self._acks[b:]
            retries, self._retries = self._retries[:b], self._retries[b:]
            deads, self._deads = self._deads[:b], self._deads[b:]
            acked = [a[0] for a in acks]
            self._flushing.update(acked)
            try:
                # Each kind's list is emptied once its call has returned, so a failure later in
                # the pass puts back only what was not written (a resent ack would be fenced).
                if acks:
                    codes = await self.scripts.run(S.ack(k, self.consumer, acks, now_ms=now,
                                                         dedupe_window_ms=s.dedupe_window_ms))  # fmt: skip
                    written, acks = acks, []
                    self._fenced("ack", written, codes)
                    await self._unlease(written, codes)
                    await self._record(written, codes)
                if retries:
                    codes = await self.scripts.run(S.retry(k, self.consumer, retries, now_ms=now))
                    done_r, retries = retries, []
                    self._fenced("retry", done_r, codes)
                    await self._hold(done_r, codes)
                    for r in done_r:  # the kept outcome belongs to the run's last attempt
                        self._kept.pop(r[0], None)
                if deads:
                    codes = await self.scripts.run(S.dead(k, self.consumer, deads, now_ms=now))
                    done_d, deads = deads, []
                    self._fenced("dead", done_d, codes)
                    await self._unlease(done_d, codes)
                    await self._record(done_d, codes)
            except _FLUSH_ERRORS:
                # Keep the outcomes; the leases keep the entries ours until Redis is back.
                self._acks[:0], self._retries[:0], self._deads[:0] = acks, retries, deads
                raise
            finally:
                self._flushing.difference_update(acked)
                self._slot_free.set()

    async def _flush_discards(self) -> None:
        """End the runs that stopped after a cancel request (discard.lua), freeing leases."""
        k, s = self.app.keys, self.app.settings
        while self._discards:
            batch, self._discards = self._discards[:FLUSH_BATCH], self._discards[FLUSH_BATCH:]
            try:
                codes = await self.scripts.run(C.discard(k, self.consumer, batch,
                    now_ms=self.app.clock.now_ms(), dedupe_window_ms=s.dedupe_window_ms))  # fmt: skip
            except _FLUSH_ERRORS:
                self._discards[:0] = batch
                raise
            self._fenced("discard", batch, codes)
            await self._unlease(batch, codes)
            await self._record(batch, codes)

    async def _record(self, items: list[Any], codes: list[int]) -> None:
        """Keep the outcomes of keep_result runs just finished (record.lua); none: no call.
        Written after the run's own outcome: a crash in between loses only the details."""
        if not self._kept:
            return
        pairs = []
        for it, code in zip(items, codes, strict=True):
            kept = self._kept.pop(it[0], None)
            if kept is not None and code == _OK:
                pairs.append(kept)
        if pairs:
            s = self.app.settings
            call = _outcomes.record(self.app.keys, pairs, now_ms=self.app.clock.now_ms(),
                                    dedupe_window_ms=s.dedupe_window_ms)  # fmt: skip
            await self.scripts.run(call)

    async def _unlease(self, items: list[Any], codes: list[int]) -> None:
        """A rule's run finished: free its overlap lease (and start a fire that waited)."""
        for it, code in zip(items, codes, strict=True):
            lease = self._leases.pop(it[0], None)
            if lease is None or code != _OK:
                continue
            sid, run_id, lease_ms = lease
            await self.scripts.run(
                S.unlease(self.app.keys, sid, run_id, lease_ms, now_ms=self.app.clock.now_ms())
            )

    async def _hold(self, items: list[Any], codes: list[int]) -> None:
        """A rule's run waits for its retry: not finished, so its overlap lease stays held,
        for the wait and a lease beyond it (no worker renews it meanwhile)."""
        for it, code in zip(items, codes, strict=True):
            lease = self._leases.pop(it[0], None)
            if lease is None or code != _OK:
                continue
            sid, run_id, lease_ms = lease
            await self.scripts.run(S.hold(self.app.keys, sid, run_id, it[2] + lease_ms))

    def _fenced(self, what: str, items: list[Any], codes: list[int]) -> None:
        lost = [it for it, c in zip(items, codes, strict=True) if c == _FENCED]
        for it in lost:
            self._lost.discard(it[0])
            log.warning("%s of run %s refused: this consumer no longer owns entry %s", what,
                        it[1], it[0], extra={"queue": self.app.queue, "run_id": it[1]})  # fmt: skip
        if lost:
            self.metrics.fenced.labels(self.app.queue, what).inc(len(lost))
            if what == "ack":
                self.metrics.duplicates.labels(self.app.queue, "worker").inc(len(lost))

    async def close(self) -> None:
        self._observe_metrics()
        self._executor.shutdown(wait=False, cancel_futures=True)
        await self.redis.aclose()
        if self._reader is not self.redis:
            await self._reader.aclose()


def _max_block_ms(client: Any) -> int | None:
    """How long a blocking read may wait: it must end before the connection's socket timeout
    (redis-py 8 sets 5 s by default), or an idle worker takes its own wait for a lost
    connection. None = no socket timeout."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if kwargs is None:  # cluster clients keep them on the nodes manager
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout", _DEFAULT_SOCKET_TIMEOUT)
    if not timeout:
        return None
    ms = float(timeout) * 1000
    return max(1, int(min(ms * 0.8, ms - 200)))


def _call_sync(fn: Any, payload: Any, info: RunInfo, began: Callable[[], Any]) -> Any:
    began()
    set_current(info)
    try:
        return fn(payload)
    finally:
        set_current(None)
