"""AsyncApp: the App's Redis calls as coroutines, for asyncio programs (FastAPI, Starlette ...).

An AsyncApp wraps an App (`.app`) and shares everything that is not I/O with it: the task
registry, settings, clock, metrics, partitions and the run checks (`App.build`). Its Redis
calls go through an asyncio client of the same deployment (plain, TLS, ACL user, Cluster or
Sentinel: the client comes from the same URL, or from the App's client) and the same Lua
scripts, built by the same `scripts.Call` builders:

- runs (zsched/aio_controls.py): `enqueue`, `enqueue_many` (conflict modes too), `cancel`,
  `reschedule`, `pause_queue`, `resume_queue` build their calls with the App's builders and
  await them (AsyncScripts); enqueues ride through a failover like App's (bounded retry,
  `retrying.ride_through_async`); `enqueue_many` validates in slices and yields between them,
  so a batch of 10,000 runs never holds the loop for more than one slice; `drain` polls with
  `asyncio.sleep`;
- reads: `get_run`, `status`, `dead_letters`, `purge_dead`, `schedule_history` await the same
  commands as the App's and decode with zsched.runs.status;
- compare-and-set loops and multi-step operations (`schedule`, `pause_schedule`,
  `run_schedule_now`, `resume_schedule`, `backfill`, `sync_schedules`, `schedules`,
  `audit_schedules`, `replay_dead`, `migrate`, durable enqueues on a Cluster) run the App's
  own code in a worker thread: one implementation of each race-sensitive path, and the loop keeps running.

Adding the async twin of an App operation that runs one script is one method:

    async def reschedule(self, run_id: str, *, run_at=None, delay=None) -> RescheduleResult:
        return await self.run(self.app.reschedule_call(run_id, run_at=run_at, delay=delay))

(`App.reschedule` being `self.scripts.run(self.reschedule_call(...))`). Any other
operation gets `return await self.in_thread(self.app.operation, *args)` until it is ported.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
from typing import Any, Self, TypeVar

import redis as _redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster

import zsched.aio_reads as _reads
from zsched.aio_controls import BUILD_SLICE as BUILD_SLICE
from zsched.aio_controls import AsyncControls, AsyncEnqueue
from zsched.app_core import AppCore
from zsched.config import QueueSettings
from zsched.errors import ConfigError
from zsched.observability.metrics import Metrics
from zsched.protocol.replies import ScheduleResult
from zsched.runs import partitioned as _parts
from zsched.runs import status as _inspect
from zsched.runs.enqueue import Group
from zsched.store import durable as _durable
from zsched.store import scripts as S
from zsched.store.connection import async_client, async_from_sync, is_cluster

T = TypeVar("T")
#: Enqueue calls (of up to ENQUEUE_BATCH runs) sent per round trip by enqueue_many.
CALLS_PER_TRIP = 10


class AsyncAppCore(AsyncEnqueue, AsyncControls):
    """The body of AsyncApp (zsched/app.py: its constructor, which makes an App): the App's
    Redis methods as coroutines over an AppCore, so that this module needs zsched.app_core and
    not zsched.app (no import circle; docs/architecture.md)."""

    @classmethod
    def from_app(cls, app: AppCore, redis: Any = None) -> Self:
        """An AsyncApp sharing `app` (its tasks, rules declared in code, settings, metrics);
        `redis`: an asyncio client to use (default: one for the App's URL or client)."""
        self = cls.__new__(cls)
        self._init(app, owns_app=False, redis=redis)
        return self

    def _init(self, app: AppCore, owns_app: bool, redis: Any = None) -> None:
        self.app = app
        self._owns_app = owns_app
        self._owns_client = redis is None  # a client the caller gave stays theirs to close
        if redis is None:
            # A sync client may say how to reach its data from asyncio (zsched.testing's
            # in-memory Redis does); otherwise the same URL, or the client's settings.
            twin = getattr(app.redis, "zsched_async_client", None)
            if twin is not None:
                redis = twin()
            else:
                redis = async_client(app.url) if app.url else async_from_sync(app.redis)
        #: The asyncio client (redis.asyncio Redis or RedisCluster), bytes replies, RESP2.
        self.redis: Any = redis
        self.scripts = S.AsyncScripts(redis)
        self._cluster = is_cluster(redis)
        self._layout_ready = False

    # -- what is shared with the App ---------------------------------------------------------

    @property
    def queue(self) -> str:
        return self.app.queue

    @property
    def keys(self) -> Any:
        return self.app.keys

    @property
    def settings(self) -> QueueSettings:
        return self.app.settings

    @property
    def metrics(self) -> Metrics:
        return self.app.metrics

    @property
    def tasks(self) -> dict[str, Any]:
        return self.app.tasks

    @property
    def partitions(self) -> int:
        return self.app.partitions

    def task(self, *args: Any, **options: Any) -> Any:
        """Register a handler on the shared registry (App.task)."""
        return self.app.task(*args, **options)

    def declare(self, schedule_id: str, task_name: str | None = None, **options: Any) -> None:
        """Declare a rule in code (App.declare; no I/O)."""
        self.app.declare(schedule_id, task_name, **options)

    def dispatcher(self, **settings: Any) -> Any:
        """The App's dispatcher (already asyncio: `await d.run()`)."""
        return self.app.dispatcher(**settings)

    def worker(self, **settings: Any) -> Any:
        """The App's worker (already asyncio: `await w.run()`)."""
        return self.app.worker(**settings)

    # -- running calls ------------------------------------------------------------------------

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one of the App's blocking operations in a worker thread."""
        return await asyncio.to_thread(partial(fn, *args, **kwargs))

    async def _ready(self) -> None:
        # The partition layout check reads and may write one key, once per App.
        if not self._layout_ready:
            await self.in_thread(self.app.ctx.claim_layout)
            self._layout_ready = True

    async def run(self, call: S.Call[T]) -> T:
        """Await one script call built by a `scripts` builder (or an App `*_call` method)."""
        await self._ready()
        return await self.scripts.run(call)

    async def _run_calls(self, calls: list[S.Call[Any]]) -> list[Any]:
        """durable.run_calls, awaited: pipelined on one server or Sentinel (with WAIT when
        durable); concurrent per call on a Cluster (durable there: the App's path, in a thread)."""
        if self._cluster:
            if self.app.durable:
                return await self.in_thread(_durable.run_calls, self.app.ctx, calls)
            return list(await asyncio.gather(*(self.scripts.run(c) for c in calls)))
        if not self.app.durable:
            return await self.scripts.run_many(calls)
        if _durable.LEVELS[self.app.durability or "replica"][0] == "WAITAOF":
            await self.in_thread(_durable.check_level, self.app.ctx)  # once per App, then at once
        pipe = self.redis.pipeline(transaction=False)
        for c in calls:
            await self.scripts.queue(c, pipe)
        pipe.execute_command(*_durable.wait_command(self.app.ctx))  # WAIT or WAITAOF, by level
        replies = _durable.checked(self.app.ctx, await pipe.execute(raise_on_error=False))
        for r in replies:
            if isinstance(r, Exception):
                raise r
        return [c.decode(r) for c, r in zip(calls, replies, strict=True)]

    # -- enqueue (aio_controls.AsyncEnqueue: enqueue, enqueue_many) ------------------------

    async def _enqueue_groups(self, groups: list[Group]) -> list[int]:
        await self._ready()
        batches, calls = self.app.enqueue_plan(groups)
        if len(calls) == 1 and not self.app.durable:
            return await self.scripts.run(calls[0])  # one run, or one batch: one call
        codes = [0] * len(groups)
        for j in range(0, len(calls), CALLS_PER_TRIP):
            replies = await self._run_calls(calls[j : j + CALLS_PER_TRIP])
            for batch, reply in zip(batches[j : j + CALLS_PER_TRIP], replies, strict=True):
                for i, code in zip(batch, reply, strict=True):
                    codes[i] = code
        return codes

    # -- runs and the queue -------------------------------------------------------------------

    async def get_run(self, run_id: str) -> _inspect.RunStatus:
        """App.get_run, awaited. Raises RunNotFound."""
        await self._ready()
        return await _reads.get_run(self.redis, self.app.keys_for_run(run_id), run_id)

    async def status(self) -> _inspect.QueueStatus:
        """App.status, awaited (the total over the partitions of a partitioned queue)."""
        await self._ready()
        if self.partitions == 1:
            return await _reads.queue_status(self.redis, self.scripts, self.keys)
        return _parts.total(self.queue, await self.partition_statuses())

    async def partition_statuses(self) -> list[_inspect.QueueStatus]:
        """App.partition_statuses, awaited."""
        await self._ready()
        views = self.app.partition_views()
        parts = [await _reads.queue_status(self.redis, self.scripts, v.keys) for v in views]
        return [
            _inspect.QueueStatus(**{**vars(p), "queue": f"{self.queue}#{v.partition}"})
            for p, v in zip(parts, views, strict=True)
        ]

    async def dead_letters(self, count: int = 100, start: str = "-") -> list[_inspect.DeadLetter]:
        """App.dead_letters, awaited."""
        await self._ready()
        if self.partitions > 1:
            return await self.in_thread(self.app.dead_letters, count, start)
        return await _reads.dead_letters(self.redis, self.keys, count, start)

    async def purge_dead(self, entry_ids: Iterable[str] | None = None) -> int:
        """App.purge_dead, awaited."""
        await self._ready()
        if self.partitions > 1:
            return await self.in_thread(self.app.purge_dead, entry_ids)
        ids = None if entry_ids is None else list(entry_ids)
        return await _reads.purge_dead(self.redis, self.keys, ids)

    async def replay_dead(self, entry_ids: Iterable[str] | None = None) -> dict[str, int]:
        """App.replay_dead, in a worker thread."""
        ids = None if entry_ids is None else list(entry_ids)
        return await self.in_thread(self.app.replay_dead, ids)

    async def migrate(self, progress: Callable[[int, int], None] | None = None) -> int:
        """App.migrate, in a worker thread."""
        return await self.in_thread(self.app.migrate, progress)

    # -- recurring rules ----------------------------------------------------------------------

    async def schedule(
        self, schedule_id: str, task_name: str | None = None, **options: Any
    ) -> ScheduleResult:
        """App.schedule (a compare-and-set loop), in a worker thread; `celery_task=` instead
        of a task name sends each fire to Celery (docs/celery.md)."""
        return await self.in_thread(self.app.schedule, schedule_id, task_name, **options)

    async def sync_schedules(self, prune: bool = False) -> dict[str, list[str]]:
        """App.sync_schedules, in a worker thread."""
        return await self.in_thread(self.app.sync_schedules, prune)

    async def unschedule(self, schedule_id: str) -> bool:
        """App.unschedule, awaited."""
        home = self.app.rule_home(schedule_id)
        return await self.run(S.unschedule(home.keys, schedule_id)) == 1

    async def resume_schedule(self, schedule_id: str) -> bool:
        """App.resume_schedule, in a worker thread."""
        return await self.in_thread(self.app.resume_schedule, schedule_id)

    async def backfill(
        self, schedule_id: str, start: datetime | float, end: datetime | float
    ) -> int:
        """App.backfill, in a worker thread."""
        return await self.in_thread(self.app.backfill, schedule_id, start, end)

    async def schedules(self) -> list[Any]:
        """App.schedules, in a worker thread."""
        return await self.in_thread(self.app.schedules)

    async def schedule_history(self, schedule_id: str, count: int = 100) -> list[dict[str, Any]]:
        """App.schedule_history, awaited."""
        await self._ready()
        home = self.app.rule_home(schedule_id)
        return await _reads.history(self.redis, home.keys, schedule_id, count)

    async def audit_schedules(self) -> list[Any]:
        """App.audit_schedules, in a worker thread."""
        return await self.in_thread(self.app.audit_schedules)

    # -- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the asyncio client, and the App if this AsyncApp made it."""
        if self._owns_client:
            await self.redis.aclose()
        if self._owns_app:
            await self.in_thread(self.app.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_SYNC_KEYS = frozenset(inspect.signature(_redis.Redis.__init__).parameters) - {"self"}


def split_client(redis: Any) -> tuple[Any, Any]:
    """AsyncApp's `redis` argument as (the asyncio client given, or None; what App takes: a
    URL, None or a sync client, the given asyncio client's sync twin)."""
    if isinstance(redis, aioredis.Redis | aiocluster.RedisCluster):
        return redis, _sync_twin(redis)
    return None, redis


def _sync_twin(client: Any) -> Any:
    """A sync client for the server an asyncio client of one server reaches."""
    pool = getattr(client, "connection_pool", None)  # a cluster client has none
    if pool is None or hasattr(pool, "service_name"):
        raise ConfigError(
            "AsyncApp takes an asyncio client of one server only; for Redis Cluster or "
            "Sentinel pass the URL (redis+cluster://..., redis+sentinel://...)"
        )
    kw = {k: v for k, v in pool.connection_kwargs.items()
          if k in _SYNC_KEYS and k not in ("retry", "redis_connect_func", "driver_info")}  # fmt: skip
    name = pool.connection_class.__name__
    if "Unix" in name:
        kw["unix_socket_path"] = kw.pop("path", None)
    if "SSL" in name:
        kw["ssl"] = True
    kw.update(protocol=2, decode_responses=False)
    return _redis.Redis(**kw)
