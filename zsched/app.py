"""The App: task registry, enqueue, cancel and inspection of one queue."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, overload

from zsched.clock import Clock, ServerTime, SystemClock
from zsched.config import QueueSettings, redis_url_from_env
from zsched.control_api import CancelMethods, ControlMethods
from zsched.errors import ConfigError, InvalidArgument, PayloadError
from zsched.observability import tracing as _tracing
from zsched.observability.metrics import Metrics
from zsched.protocol.envelope import Payload, check_payload, encode_first
from zsched.protocol.keys import QueueKeys
from zsched.protocol.replies import EnqueueCode
from zsched.protocol.runids import fresh_run_id
from zsched.runs import status as _inspect
from zsched.runs.controls import CancelResult, EnqueueOutcome
from zsched.runs.runinput import check_names, delay_ms, to_ms
from zsched.schedule_api import ScheduleMethods
from zsched.store import delayed as _delayed
from zsched.store import durable as _durable
from zsched.store import partitions as _partitions
from zsched.store import scripts as S
from zsched.store.connection import sync_client
from zsched.store.direct import DEFAULT_SPIN_US
from zsched.store.retrying import ride_through
from zsched.worker.tasks import Task, TaskOptions

if TYPE_CHECKING:
    from zsched.aio import AsyncApp
    from zsched.worker.handles import TaskHandle
    from zsched.worker.payloads import Codec

P = TypeVar("P")
R = TypeVar("R")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: Runs per enqueue.lua call: 100 take ~0.5 ms of Redis time into a small queue and up to
#: ~2.5 ms into one of 1M runs due at random instants (ZADD into a big skiplist misses cache),
#: under the 5 ms any script may hold Redis (1000, the scripts' bound, took 5+ ms).
ENQUEUE_BATCH = 100
log = logging.getLogger(__name__)
#: One run as enqueue.lua takes it: (run_id, run_at (epoch ms, or "+N" ms after TIME), task,
#: envelope).
Group = tuple[str, int | str, str, bytes]
# Bound once: looking a member up on an Enum class costs ~0.3 us, paid per run otherwise.
_ENQUEUED, _DUPLICATE_DONE = EnqueueCode.ENQUEUED, EnqueueCode.DUPLICATE_DONE


class EnqueuedId(str):
    """A run id returned by enqueue; `.duplicate` says whether it was already live or done,
    `.replaced` whether a waiting run took the new payload (on_conflict="replace"/"debounce"),
    `.outcome` which of these happened (a zsched.EnqueueOutcome)."""

    duplicate: bool = False
    replaced: bool = False

    def __new__(
        cls, value: str, duplicate: bool = False, outcome: EnqueueOutcome | None = None
    ) -> EnqueuedId:
        obj = super().__new__(cls, value)
        if duplicate:  # the class default covers the common case without an instance dict
            obj.duplicate = True
        if outcome is not None:
            obj.__dict__["_outcome"] = outcome
            obj.replaced = outcome in (EnqueueOutcome.REPLACED, EnqueueOutcome.DEBOUNCED)
        return obj

    @property
    def outcome(self) -> EnqueueOutcome:
        got: EnqueueOutcome | None = self.__dict__.get("_outcome")
        if got is not None:
            return got
        return EnqueueOutcome.DUPLICATE if self.duplicate else EnqueueOutcome.ENQUEUED


def _bytes_client(redis: Any) -> Any:
    """A sync client for a URL, or the client given; refused if it decodes replies to text."""
    client = sync_client(redis) if isinstance(redis, str) else redis
    encoder = getattr(client, "get_encoder", None)
    if encoder is not None and encoder().decode_responses:
        raise ConfigError(
            "zsched needs a Redis client with decode_responses=False: envelopes are msgpack "
            "bytes, not text (pass a URL, or a client made without decode_responses)"
        )
    return client


class AppOptions(TypedDict, total=False):
    """App's keyword arguments, for those that pass them on (AsyncApp); App documents them."""

    settings: QueueSettings | None
    clock: Clock | None
    metrics: Metrics | None
    partitions: int | str
    durable: bool | str
    durable_timeout: float
    spin_us: int


class App(ScheduleMethods, ControlMethods, CancelMethods):
    """One queue: register tasks, enqueue runs, inspect them; builds dispatchers and workers."""

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
        self.url: str | None = redis if isinstance(redis, str) else None
        self.redis: Any = _bytes_client(redis)
        self.queue = queue
        self.keys = QueueKeys(queue)
        self.settings = settings or QueueSettings()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics or Metrics()
        self.tasks: dict[str, Task] = {}
        #: Declared payload types by task name (zsched.worker.payloads), checked at enqueue.
        self.payload_types: dict[str, Codec] = {}
        #: Rules declared in code (`declare`), synced when a dispatcher starts.
        self.declared: dict[str, dict[str, Any]] = {}
        self._scripts: S.Scripts | None = None
        self._enqueued_child: tuple[Metrics, Any] | None = None
        self.partitions = (
            _partitions.stored_count(self.redis, queue)
            if partitions == "auto"
            else _partitions.check_count(partitions)
        )
        #: Which partition this App is a view of (partition_view); None for the whole queue.
        self.partition: int | None = None
        self._views: list[App] | None = None
        self._layout_checked = [False]  # shared with the views
        if not durable_timeout > 0:
            raise InvalidArgument(
                f"durable_timeout must be > 0 seconds, got {durable_timeout!r}", "durable_timeout"
            )
        if not (isinstance(spin_us, int) and spin_us >= 0):
            raise InvalidArgument(
                f"spin_us must be a whole number of microseconds >= 0, got {spin_us!r}", "spin_us"
            )
        #: The durability level (zsched/store/durable.py LEVELS), None when not durable.
        self.durability = _durable.level_of(durable)
        self.durable = self.durability is not None
        self._level_checked = [False]  # WAITAOF exists on the server: shared with the views
        self.durable_timeout_ms = max(1, int(durable_timeout * 1000))
        self.spin_us = spin_us

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
        if self._scripts is None:
            self._scripts = S.Scripts(self.redis, spin_us=self.spin_us)
        return self._scripts

    def _local_ms(self) -> int:
        # Envelope fields (scheduled_for of a relative delay): on the server's clock, through a
        # measured offset; due times of relative delays come from Redis TIME in the script.
        now = self.clock.now_ms()
        if now is not None:
            return now
        st = self.__dict__.get("_server_time")
        if st is None or st.clock is not self.clock:
            st = self.__dict__["_server_time"] = ServerTime(self.clock)
        if st.stale():
            st.measure(self.redis)
        return st.now_ms()

    def build(
        self,
        task_name: str,
        payload: Payload = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        run_id: str | None = None,
        trace: dict[str, str] | None = None,
    ) -> Group:
        """Validate one run and return its enqueue group (run_id, run_at, task, envelope).
        `trace`: the W3C trace context to carry (zsched/observability/tracing.py)."""
        check_names(task_name, run_id)
        codec = self.payload_types.get(task_name)
        if codec is not None:
            payload = codec.to_wire(payload)
        if run_at is not None and delay is not None:
            raise InvalidArgument("give run_at or delay, not both")
        now = self._local_ms()
        at: int | str
        if run_at is not None:
            at = due = to_ms(run_at)
        else:
            d = delay_ms(delay) if delay is not None else 0
            due = now + d
            at = f"+{d}" if self.clock.now_ms() is None else due
        rid = run_id or fresh_run_id()
        try:
            env = encode_first(task_name, payload, due, now, trace)
        except PayloadError:
            check_payload(payload, self.settings.max_payload_bytes)  # raises, naming the type
            raise
        # The payload is packed once, inside the envelope; only a large envelope needs the
        # payload measured alone against the limit.
        if len(env) > self.settings.max_payload_bytes:
            check_payload(payload, self.settings.max_payload_bytes)
        return rid, at, task_name, env

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
        with _tracing.enqueue_span(self.queue) as span:
            group = self.build(task_name, payload, run_at=run_at, delay=delay, run_id=run_id,
                               trace=span.carrier)  # fmt: skip
            if on_conflict != "keep" or max_delay is not None:
                return self.ride(  # type: ignore[no-any-return]
                    "enqueue", lambda _: self.enqueue_conflict(group, on_conflict, max_delay)
                )
            (code,) = self.ride("enqueue", lambda _attempt: self._enqueue_groups([group]))
            span.enqueued([group[0]], 0 if code == _ENQUEUED else 1)
        return self.enqueued_id(group[0], code, run_id is not None)

    def enqueued_id(self, run_id: str, code: int, named: bool) -> EnqueuedId:
        """The id an enqueue returns for `code`, counted in the metrics (App and AsyncApp).
        A generated id (`named` False) can only meet an earlier attempt of this very call,
        whose reply was lost: never a duplicate."""
        dup = code != _ENQUEUED and named
        self._count(0 if dup else 1, 1 if dup else 0)
        return _enqueued(run_id, dup, code)

    def enqueued_ids(self, out: list[EnqueuedId | None], groups: list[Group], keep: list[int],
                     codes: list[int], given: list[bool]) -> list[EnqueuedId]:  # fmt: skip
        """enqueue_many's answer: `out` (conflict runs filled in) with the plain runs `keep`
        of `groups` filled in from their `codes`, counted once for the batch."""
        dups = [c != _ENQUEUED and given[i] for i, c in zip(keep, codes, strict=True)]
        self._count(len(dups) - sum(dups), sum(dups))
        for i, c, d in zip(keep, codes, dups, strict=True):
            out[i] = _enqueued(groups[i][0], d, c)
        return [r for r in out if r is not None]

    def enqueue_many(
        self, items: Iterable[Mapping[str, Any] | tuple[Any, ...]]
    ) -> list[EnqueuedId]:
        """Schedule many runs in one round trip. Items: dicts of enqueue's arguments
        (`task`, `payload`, `run_at`, `delay`, `run_id`, `on_conflict`, `max_delay`) or
        (task, payload) tuples. Runs with a conflict mode go in calls of their own."""
        items = list(items)
        with _tracing.enqueue_span(self.queue, len(items)) as span:
            groups, modes, given = self._build_items(items, span.carrier)
            if not groups:
                return []
            out: list[EnqueuedId | None] = [None] * len(groups)
            if modes:
                batch = [(groups[i], *modes[i]) for i in modes]
                conflicts = self.ride("enqueue", lambda _: self.enqueue_conflicts(batch))
                for i, rid in zip(modes, conflicts, strict=True):
                    out[i] = rid
            keep = [i for i in range(len(groups)) if i not in modes]
            plain = [groups[i] for i in keep]
            codes = self.ride("enqueue", lambda _: self._enqueue_groups(plain)) if plain else []
            span.enqueued([g[0] for g in plain], sum(1 for c in codes if c != _ENQUEUED))
        return self.enqueued_ids(out, groups, keep, codes, given)

    def _build_items(
        self, items: list[Mapping[str, Any] | tuple[Any, ...]], trace: Any
    ) -> tuple[list[Group], dict[int, tuple[str, Any]], list[bool]]:
        """enqueue_many's items checked and packed; the conflict mode of those that set one;
        whether the caller named each run id (a generated one is never a duplicate)."""
        groups: list[Group] = []
        modes: dict[int, tuple[str, Any]] = {}
        given: list[bool] = []
        for item in items:
            self.build_item(item, trace, groups, modes, given)
        return groups, modes, given

    def build_item(
        self,
        item: Mapping[str, Any] | tuple[Any, ...],
        trace: Any,
        groups: list[Group],
        modes: dict[int, tuple[str, Any]],
        given: list[bool],
    ) -> None:
        """One enqueue_many item onto the lists of _build_items (AsyncApp's too)."""
        if not isinstance(item, Mapping):
            given.append(False)  # (task, payload): the id is generated
            groups.append(self.build(*item, trace=trace))
            return
        kw = dict(item)
        if "task" not in kw:
            raise InvalidArgument(f"enqueue_many item {len(groups)} has no 'task'", "task")
        mode, cap = kw.pop("on_conflict", "keep"), kw.pop("max_delay", None)
        if mode != "keep" or cap is not None:
            modes[len(groups)] = (mode, cap)
        given.append(kw.get("run_id") is not None)
        groups.append(self.build(kw.pop("task"), kw.pop("payload", None), trace=trace, **kw))

    def ride(self, what: str, call: Callable[[int], Any]) -> Any:
        """`call(attempt)`, retried through a failover or a lost connection for at most
        `settings.outage_retry_ms` (zsched/store/retrying.py); then RedisUnavailable."""
        return ride_through(call, bound_ms=self.settings.outage_retry_ms, what=what,
                            queue=self.queue, logger=log)  # fmt: skip

    def _enqueue_groups(self, groups: list[Group]) -> list[int]:
        """Route runs to their partitions, enqueue them in calls of at most MAX_BATCH (durably
        if asked), and return one reply code per run, in order."""
        _partitions.claim_layout(self)
        if self.partitions == 1 and not self.durable and len(groups) == 1:
            # One call, the common case (every enqueue()): no routing, no pipeline.
            return self.scripts.run(self._enqueue_call(groups))
        batches, calls = self.enqueue_plan(groups)
        codes = [0] * len(groups)
        for batch, reply in zip(batches, _durable.run_calls(self, calls), strict=True):
            for i, code in zip(batch, reply, strict=True):
                codes[i] = code
        return codes

    def enqueue_plan(self, groups: list[Group]) -> tuple[list[list[int]], list[S.Call[list[int]]]]:
        """The enqueue calls for `groups` (per partition, at most ENQUEUE_BATCH runs each, in
        due order) and, per call, the indexes of its runs in `groups` (shared with AsyncApp)."""
        by_part: dict[int, list[int]] = {}
        for i in _delayed.due_order(groups):
            by_part.setdefault(self.run_partition(groups[i][0]), []).append(i)
        batches: list[list[int]] = []
        calls: list[S.Call[list[int]]] = []
        for part, idx in by_part.items():
            keys = self.keys if self.partitions == 1 else QueueKeys(self.queue, part)
            for j in range(0, len(idx), ENQUEUE_BATCH):
                batches.append(idx[j : j + ENQUEUE_BATCH])
                calls.append(self._enqueue_call([groups[i] for i in batches[-1]], keys))
        return batches, calls

    def _enqueue_call(
        self, groups: list[Group], keys: QueueKeys | None = None
    ) -> S.Call[list[int]]:
        return S.enqueue(
            keys or self.keys,
            groups,  # type: ignore[arg-type]
            now_ms=self.clock.now_ms(),
            dedupe_window_ms=self.settings.dedupe_window_ms,
            max_envelope_bytes=self.settings.max_payload_bytes + 4096,
        )

    def _count(self, added: int, duplicates: int) -> None:
        if added:
            # The labelled child is cached: labels() cost ~8 us, a tenth of one enqueue().
            cached = self._enqueued_child
            if cached is None or cached[0] is not self.metrics:
                cached = self._enqueued_child = (
                    self.metrics,
                    self.metrics.enqueued.labels(self.queue),
                )
            cached[1].inc(added)
        if duplicates:
            self.metrics.duplicates.labels(self.queue, "enqueue").inc(duplicates)

    # -- inspect -----------------------------------------------------------------------------

    def cancel(self, run_id: str) -> CancelResult:
        """Cancel a run wherever it is; the result tells what happened (true when removed
        now; `.requested` for a running run). See ControlMethods.cancel_run."""
        return self.cancel_run(run_id)

    def migrate(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Move delayed runs kept in key layout 2 (zsched 0.1: one ZSET) into key layout 3,
        in every partition; safe while the queue runs, and a no-op when there is nothing to
        move. Returns the runs moved. `progress(moved, left)` is called after each batch."""
        return _delayed.migrate(self.partition_views(), progress)

    def get_run(self, run_id: str) -> _inspect.RunStatus:
        """The state of a run: scheduled, ready, running, done or dead. Raises RunNotFound."""
        return _inspect.get_run(self.redis, self.keys_for_run(run_id), run_id)

    def status(self) -> _inspect.QueueStatus:
        """Counts and ages of the queue (delayed, due backlog, stream, pending, dead); the
        total over all partitions of a partitioned queue (see partition_statuses)."""
        if self._whole_partitioned:
            return _partitions.total(self.queue, self.partition_statuses())
        return _inspect.queue_status(self.redis, self.scripts, self.keys)

    def dead_letters(self, count: int = 100, start: str = "-") -> list[_inspect.DeadLetter]:
        """Dead letters, oldest first."""
        if self._whole_partitioned:
            return _partitions.dead_letters(self, count, start)
        return _inspect.dead_letters(self.redis, self.keys, count, start)

    def replay_dead(self, entry_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Put dead letters back as fresh runs (attempt 1, due now). None = all of them."""
        if self._whole_partitioned:
            return _partitions.replay_dead(self, entry_ids)
        return _inspect.replay_dead(self, entry_ids)

    def purge_dead(self, entry_ids: Iterable[str] | None = None) -> int:
        """Delete dead letters. None = all of them. Returns how many were deleted."""
        if self._whole_partitioned:
            return _partitions.purge_dead(self, entry_ids)
        return _inspect.purge_dead(self.redis, self.keys, entry_ids)

    # -- partitions (docs/scaling.md) --------------------------------------------------------

    @property
    def _whole_partitioned(self) -> bool:
        # Every read of the queue passes here: a partition count that differs from the one
        # recorded in Redis is refused (ConfigError), not read in the wrong keys.
        _partitions.claim_layout(self)
        return self.partitions > 1 and self.partition is None

    def partition_for(self, key: str) -> int:
        """The partition of an id among this queue's partitions (CRC-32 of the id, mod N).
        A recurring rule lives in `partition_for(schedule_id)`."""
        return _partitions.partition_for(key, self.partitions)

    def run_partition(self, run_id: str) -> int:
        """The partition holding run `run_id` (a fire `<schedule_id>@<slot>` goes with its rule)."""
        return _partitions.run_partition(run_id, self.partitions)

    def keys_for_run(self, run_id: str) -> QueueKeys:
        """The keys of the partition (or the queue) that holds run `run_id`."""
        _partitions.claim_layout(self)
        if self.partitions == 1:
            return self.keys
        return QueueKeys(self.queue, self.run_partition(run_id))

    def partition_view(self, i: int) -> App:
        """A light App for partition `i` (shares client, tasks, metrics, settings)."""
        return self.partition_views()[i]

    def partition_views(self) -> list[App]:
        """One view per partition; [self] for a queue that is not partitioned."""
        if self.partitions == 1:
            return [self]
        if self.partition is not None:
            raise ValueError(f"partition {self.partition} of {self.queue!r} is a view already")
        if self._views is None:
            self._views = [_partitions.make_view(self, i) for i in range(self.partitions)]
        return self._views

    def partition_statuses(self) -> list[_inspect.QueueStatus]:
        """The status of each partition (queue reads `<queue>#<i>`)."""
        return _partitions.statuses(self)

    # -- processes ---------------------------------------------------------------------------

    def dispatcher(self, **settings: Any) -> Any:
        """A Dispatcher for this queue (see zsched.dispatch.dispatcher); for a partitioned queue, a
        MultiDispatcher running one per partition."""
        from zsched.dispatch.dispatcher import Dispatcher

        if self._whole_partitioned:
            return _partitions.MultiDispatcher(self, **settings)
        return Dispatcher(self, **settings)

    def worker(self, **settings: Any) -> Any:
        """A Worker for this queue (see zsched.worker.worker); for a partitioned queue, a MultiWorker
        running one per partition, each with its share of `concurrency`."""
        from zsched.worker.worker import Worker

        if self._whole_partitioned:
            return _partitions.MultiWorker(self, **settings)
        return Worker(self, **settings)

    def aio(self, redis: Any = None) -> AsyncApp:
        """An AsyncApp sharing this App's tasks, declared rules, settings and metrics, on an
        asyncio client of the same deployment (or `redis`, an asyncio client); close it with
        `await aio.aclose()` (this App stays open)."""
        from zsched.aio import AsyncApp

        return AsyncApp.from_app(self, redis)

    def close(self) -> None:
        """Close the client and the connections of every partition view's direct path."""
        for app in [self, *(self._views or [])]:
            if app._scripts is not None:
                app._scripts.close()
        self.redis.close()


def _enqueued(run_id: str, duplicate: bool, code: int) -> EnqueuedId:
    """The id enqueue returns: a duplicate says whether it met a live or a recently done run."""
    if not duplicate:
        return EnqueuedId(run_id)
    done = EnqueueOutcome.DUPLICATE_DONE if code == _DUPLICATE_DONE else None
    return EnqueuedId(run_id, True, done)
