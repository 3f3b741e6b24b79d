"""AppCore: task registry, enqueue, cancel and inspection of one queue (App, less `aio()`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self, TypedDict, TypeVar, Unpack, overload

from zsched.clock import Clock, SystemClock
from zsched.config import QueueSettings, redis_url_from_env
from zsched.context import InContext, QueueContext
from zsched.control_api import CancelMethods, ControlMethods
from zsched.errors import InvalidArgument
from zsched.observability import tracing as _tracing
from zsched.observability.metrics import Metrics
from zsched.protocol.envelope import Payload
from zsched.protocol.keys import QueueKeys
from zsched.runs import enqueue as _enq
from zsched.runs import partitioned as _parts
from zsched.runs import status as _inspect
from zsched.runs.controls import CancelResult
from zsched.runs.enqueue import ENQUEUE_BATCH as ENQUEUE_BATCH
from zsched.runs.enqueue import EnqueuedId as EnqueuedId
from zsched.runs.enqueue import Group
from zsched.schedule_api import ScheduleMethods
from zsched.store import delayed as _delayed
from zsched.store import durable as _durable
from zsched.store import partitions as _partitions
from zsched.store import scripts as S
from zsched.store.connection import bytes_client
from zsched.store.direct import DEFAULT_SPIN_US
from zsched.worker.tasks import Task, TaskOptions

if TYPE_CHECKING:
    from zsched.dispatch.dispatcher import Dispatcher
    from zsched.dispatch.multi import MultiDispatcher
    from zsched.worker.handles import TaskHandle
    from zsched.worker.multi import MultiWorker
    from zsched.worker.payloads import Codec
    from zsched.worker.worker import Worker

P = TypeVar("P")
R = TypeVar("R")

DEFAULT_URL = "redis://127.0.0.1:6379/0"


class AppOptions(TypedDict, total=False):
    """App's keyword arguments, for those that pass them on (AsyncApp); App documents them."""

    settings: QueueSettings | None
    clock: Clock | None
    metrics: Metrics | None
    partitions: int | str
    durable: bool | str
    durable_timeout: float
    spin_us: int


class AppCore(ScheduleMethods, ControlMethods, CancelMethods):
    """Everything of App but its asyncio face (`App.aio()`): what an AsyncApp wraps, so that
    zsched.aio needs this module and not zsched.app (no import circle; docs/architecture.md)."""

    # What the App shares with the layers below it lives in its context (zsched/context.py).
    redis: InContext[Any] = InContext()
    url: InContext[str | None] = InContext()
    queue: InContext[str] = InContext()
    keys: InContext[QueueKeys] = InContext()
    settings: InContext[QueueSettings] = InContext()
    clock: InContext[Clock] = InContext()
    metrics: InContext[Metrics] = InContext()
    #: Registered tasks by name.
    tasks: InContext[dict[str, Task]] = InContext()
    #: Declared payload types by task name (zsched.worker.payloads), checked at enqueue.
    payload_types: InContext[dict[str, Codec]] = InContext()
    partitions: InContext[int] = InContext()
    #: Which partition this App is a view of (partition_view); None for the whole queue.
    partition: InContext[int | None] = InContext()
    #: The durability level (zsched/store/durable.py LEVELS), None when not durable.
    durability: InContext[str | None] = InContext()
    durable_timeout_ms: InContext[int] = InContext()
    spin_us: InContext[int] = InContext()

    def __init__(
        self,
        redis: Any = None,
        queue: str = "default",
        *,
        settings: QueueSettings | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        partitions: int | str = 1,
        durable: bool | str = False,
        durable_timeout: float = 1.0,
        spin_us: int = DEFAULT_SPIN_US,
    ) -> None:
        """`partitions`: split the queue over N hash tags (docs/scaling.md); "auto" reads the
        count recorded in Redis (the CLI does). `durable`: enqueue returns only once a replica
        acknowledged the write (True or "replica": WAIT 1), once the master fsynced it to its
        AOF ("fsync": WAITAOF 1 0), or both the master and a replica did ("replica+fsync":
        WAITAOF 1 1; Redis 7.2+ or Valkey), waiting at most `durable_timeout` seconds per
        attempt, else it raises NotReplicated (zsched/store/durable.py). `spin_us`: how long a sync
        call polls its socket for the reply before it sleeps (0: never; zsched/store/direct.py says why)."""
        if redis is None:
            redis = redis_url_from_env() or DEFAULT_URL
        client = bytes_client(redis)
        count = (
            _partitions.stored_count(client, queue)
            if partitions == "auto"
            else _partitions.check_count(partitions)
        )
        if not durable_timeout > 0:
            raise InvalidArgument(
                f"durable_timeout must be > 0 seconds, got {durable_timeout!r}", "durable_timeout"
            )
        if not (isinstance(spin_us, int) and spin_us >= 0):
            raise InvalidArgument(
                f"spin_us must be a whole number of microseconds >= 0, got {spin_us!r}", "spin_us"
            )
        #: What the layers below the App receive (zsched/context.py).
        self.ctx = QueueContext(
            redis=client, queue=queue, keys=QueueKeys(queue),
            settings=settings or QueueSettings(), clock=clock or SystemClock(),
            metrics=metrics or Metrics(), partitions=count,
            url=redis if isinstance(redis, str) else None,
            durability=_durable.level_of(durable),
            durable_timeout_ms=max(1, int(durable_timeout * 1000)), spin_us=spin_us,
        )  # fmt: skip
        self._views: tuple[Any, list[Self]] | None = None

    @classmethod
    def of(cls, ctx: QueueContext) -> Self:
        """An App over a context (a partition view's)."""
        app = cls.__new__(cls)
        app.ctx, app._views = ctx, None
        return app

    @property
    def durable(self) -> bool:
        return self.ctx.durable

    @property
    def declared(self) -> dict[str, dict[str, Any]]:
        """Rules declared in code (`declare`), synced when a dispatcher starts; on a
        partition view, those that live in its partition."""
        return self.ctx.declared_here()

    # -- tasks -------------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[[P], R], /) -> TaskHandle[P, R]: ...
    @overload
    def task(
        self, *, payload: type | None = None, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[[P], R]], TaskHandle[P, R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:  # type: ignore[misc]
        """Register a handler: `@app.task` or `@app.task(name=..., max_attempts=...)`. Returns
        a TaskHandle (zsched/worker/handles.py), still callable as the function. `payload=`: a
        dataclass, TypedDict or pydantic model the payload must be (default: the handler's
        first parameter's annotation, if it is one of those; docs/typed-tasks.md).
        `keep_result=True`: keep each run's outcome (attempts, duration, return value up to
        `max_result_bytes` of msgpack) for the dedupe window, read by `get_run`.
        `max_concurrency=N`, `rate="10/s"` (+ `burst=`), `limit_key=fn(payload)`: limits
        shared by every worker in Redis (zsched/worker/limits.py, docs/policies.md)."""
        from zsched.worker.handles import register

        return register(self, fn, options)

    # -- enqueue -----------------------------------------------------------------------------

    @property
    def scripts(self) -> S.Scripts:
        return self.ctx.scripts

    def build(
        self, task_name: str, payload: Payload = None, **options: Unpack[_enq.BuildOptions]
    ) -> Group:
        """Validate one run and return its enqueue group (run_id, run_at, task, envelope):
        runs/enqueue.py build, whose keywords (run_at, delay, run_id, trace) these are."""
        return _enq.build(self.ctx, task_name, payload, **options)

    def enqueue(
        self,
        task_name: str,
        payload: Payload = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        run_id: str | None = None,
        on_conflict: str = "keep",
        max_delay: timedelta | float | None = None,
    ) -> EnqueuedId:
        """Schedule one run; returns its id (`.duplicate` is True if it was already there).

        `on_conflict`, when a run with this id is waiting in the delayed set: "keep" (leave
        it, a duplicate), "replace" (it takes the new payload and due time) or "debounce"
        (the new payload, and the due pushed back to the new one but never past `max_delay`
        after its first enqueue). A run already dispatched or done is never replaced.
        Rides through a failover for `settings.outage_retry_ms` (docs/reliability.md)."""
        ctx = self.ctx
        with _tracing.enqueue_span(ctx.queue) as span:
            group = _enq.build(ctx, task_name, payload, run_at=run_at, delay=delay,
                               run_id=run_id, trace=span.carrier)  # fmt: skip
            if on_conflict != "keep" or max_delay is not None:
                return ctx.ride(
                    "enqueue", lambda _: self.enqueue_conflict(group, on_conflict, max_delay)
                )
            (code,) = ctx.ride("enqueue", lambda _attempt: _enq.send(ctx, [group]))
            span.enqueued([group[0]], 0 if code == _enq.ENQUEUED else 1)
        return _enq.enqueued_id(ctx, group[0], code, run_id is not None)

    def enqueue_many(
        self, items: Iterable[Mapping[str, Any] | tuple[Any, ...]]
    ) -> list[EnqueuedId]:
        """Schedule many runs in one round trip. Items: dicts of enqueue's arguments
        (`task`, `payload`, `run_at`, `delay`, `run_id`, `on_conflict`, `max_delay`) or
        (task, payload) tuples. Runs with a conflict mode go in calls of their own."""
        ctx, items = self.ctx, list(items)
        with _tracing.enqueue_span(ctx.queue, len(items)) as span:
            groups: list[Group] = []
            modes: dict[int, tuple[str, Any]] = {}
            given: list[bool] = []
            for item in items:
                _enq.build_item(ctx, item, span.carrier, groups, modes, given)
            if not groups:
                return []
            out: list[EnqueuedId | None] = [None] * len(groups)
            if modes:
                batch = [(groups[i], *modes[i]) for i in modes]
                conflicts = ctx.ride("enqueue", lambda _: self.enqueue_conflicts(batch))
                for i, rid in zip(modes, conflicts, strict=True):
                    out[i] = rid
            keep = [i for i in range(len(groups)) if i not in modes]
            plain = [groups[i] for i in keep]
            codes = ctx.ride("enqueue", lambda _: _enq.send(ctx, plain)) if plain else []
            span.enqueued([g[0] for g in plain], _enq.duplicates_in(codes))
        return _enq.enqueued_ids(ctx, out, groups, keep, codes, given)

    def build_item(self, item: Mapping[str, Any] | tuple[Any, ...], trace: Any, groups: list[Group],
                   modes: dict[int, tuple[str, Any]], given: list[bool]) -> None:  # fmt: skip
        """One enqueue_many item onto the lists (runs/enqueue.py build_item)."""
        _enq.build_item(self.ctx, item, trace, groups, modes, given)

    def ride(self, what: str, call: Callable[[int], Any]) -> Any:
        """`call(attempt)`, retried through a failover or a lost connection for at most
        `settings.outage_retry_ms` (zsched/store/retrying.py); then RedisUnavailable."""
        return self.ctx.ride(what, call)

    def enqueue_plan(self, groups: list[Group]) -> tuple[list[list[int]], list[S.Call[list[int]]]]:
        """The enqueue calls for `groups` (per partition, at most ENQUEUE_BATCH runs each, in
        due order) and, per call, the indexes of its runs in `groups` (shared with AsyncApp)."""
        return _enq.plan(self.ctx, groups)

    # -- inspect -----------------------------------------------------------------------------

    def cancel(self, run_id: str) -> CancelResult:
        """Cancel a run wherever it is; the result tells what happened (true when removed
        now; `.requested` for a running run). See ControlMethods.cancel_run."""
        return self.cancel_run(run_id)

    def migrate(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Move delayed runs kept in key layout 2 (zsched 0.1: one ZSET) into key layout 3,
        in every partition; safe while the queue runs, and a no-op when there is nothing to
        move. Returns the runs moved. `progress(moved, left)` is called after each batch."""
        return _delayed.migrate(self.ctx.views(), progress)

    def get_run(self, run_id: str) -> _inspect.RunStatus:
        """The state of a run: scheduled, ready, running, done or dead. Raises RunNotFound."""
        return _inspect.get_run(self.redis, self.keys_for_run(run_id), run_id)

    def status(self) -> _inspect.QueueStatus:
        """Counts and ages of the queue (delayed, due backlog, stream, pending, dead); the
        total over all partitions of a partitioned queue (see partition_statuses)."""
        if self._whole_partitioned:
            return _parts.total(self.ctx.queue, _parts.statuses(self.ctx))
        return _inspect.queue_status(self.redis, self.scripts, self.keys)

    def dead_letters(self, count: int = 100, start: str = "-") -> list[_inspect.DeadLetter]:
        """Dead letters, oldest first."""
        if self._whole_partitioned:
            return _parts.dead_letters(self.ctx, count, start)
        return _inspect.dead_letters(self.redis, self.keys, count, start)

    def replay_dead(self, entry_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Put dead letters back as fresh runs (attempt 1, due now). None = all of them."""
        if self._whole_partitioned:
            return _parts.replay_dead(self.ctx, entry_ids)
        return _inspect.replay_dead(self.ctx, entry_ids)

    def purge_dead(self, entry_ids: Iterable[str] | None = None) -> int:
        """Delete dead letters. None = all of them. Returns how many were deleted."""
        if self._whole_partitioned:
            return _parts.purge_dead(self.ctx, entry_ids)
        return _inspect.purge_dead(self.redis, self.keys, entry_ids)

    # -- partitions (docs/scaling.md) --------------------------------------------------------

    @property
    def _whole_partitioned(self) -> bool:
        # Every read of the queue passes here: a partition count that differs from the one
        # recorded in Redis is refused (ConfigError), not read in the wrong keys.
        self.ctx.claim_layout()
        return self.ctx.whole_partitioned

    def partition_for(self, key: str) -> int:
        """The partition of an id among this queue's partitions (CRC-32 of the id, mod N).
        A recurring rule lives in `partition_for(schedule_id)`."""
        return _partitions.partition_for(key, self.ctx.partitions)

    def run_partition(self, run_id: str) -> int:
        """The partition holding run `run_id` (a fire `<schedule_id>@<slot>` goes with its rule)."""
        return _partitions.run_partition(run_id, self.ctx.partitions)

    def keys_for_run(self, run_id: str) -> QueueKeys:
        """The keys of the partition (or the queue) that holds run `run_id`."""
        return self.ctx.keys_for_run(run_id)

    def partition_view(self, i: int) -> Self:
        """A light App for partition `i` (shares client, tasks, metrics, settings)."""
        return self.partition_views()[i]

    def rule_home(self, schedule_id: str) -> Self:
        """The App (on a partitioned queue: the partition view) where this rule lives."""
        if self.ctx.whole_partitioned:
            return self.partition_view(self.partition_for(schedule_id))
        return self

    def partition_views(self) -> list[Self]:
        """One view per partition; [self] for a queue that is not partitioned. A view's
        enqueue still routes by run id, so it is safe to hand to any code that takes an App;
        its dispatcher and worker serve its partition only."""
        ctx = self.ctx
        if ctx.partitions == 1:
            return [self]
        if ctx.partition is not None:
            raise InvalidArgument(f"partition {ctx.partition} of {ctx.queue!r} is a view already")
        if self._views is None or self._views[0] is not ctx.shared:
            self._views = (ctx.shared, [type(self).of(v) for v in ctx.views()])
        return self._views[1]

    def partition_statuses(self) -> list[_inspect.QueueStatus]:
        """The status of each partition (queue reads `<queue>#<i>`)."""
        return _parts.statuses(self.ctx)

    # -- processes ---------------------------------------------------------------------------

    def dispatcher(self, **settings: Any) -> Dispatcher | MultiDispatcher:
        """A Dispatcher for this queue (see zsched.dispatch.dispatcher); for a partitioned queue, a
        MultiDispatcher running one per partition."""
        from zsched.dispatch.dispatcher import Dispatcher
        from zsched.dispatch.multi import MultiDispatcher

        if self._whole_partitioned:
            return MultiDispatcher(self.ctx, **settings)
        return Dispatcher(self.ctx, **settings)

    def worker(self, **settings: Any) -> Worker | MultiWorker:
        """A Worker for this queue (see zsched.worker.worker); for a partitioned queue, a MultiWorker
        running one per partition, each with its share of `concurrency`."""
        from zsched.worker.multi import MultiWorker
        from zsched.worker.worker import Worker

        if self._whole_partitioned:
            return MultiWorker(self.ctx, **settings)
        return Worker(self.ctx, **settings)

    def close(self) -> None:
        """Close the client and the connections of every partition view's direct path."""
        self.ctx.shared.close()
        self.redis.close()
