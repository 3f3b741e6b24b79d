"""QueueContext: what the layers below the facade receive instead of the App.

One frozen value per queue (or per partition of a partitioned queue): the client, the
queue's keys and scripts, its clock, settings and metrics, the task registry and the rules
declared in code. A partition view is `dataclasses.replace(ctx, keys=..., partition=...)`.
The registries (tasks, payload types, declared rules) are dicts shared with the App, and the
few facts learned once per App live in `shared` (store.state.SharedState).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Generic, Protocol, TypeVar, cast, overload

from zsched.clock import Clock, ServerTime
from zsched.config import QueueSettings
from zsched.errors import InvalidArgument
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import QueueKeys
from zsched.store import partitions as _partitions
from zsched.store.connection import async_client, async_from_sync
from zsched.store.direct import DEFAULT_SPIN_US
from zsched.store.retrying import ride_through
from zsched.store.scripts import Scripts
from zsched.store.state import SharedState

T = TypeVar("T")
V = TypeVar("V")
log = logging.getLogger("zsched.app")


@dataclass(frozen=True, eq=False)
class QueueContext:
    """One queue, or one partition of it (`partition` set), as lower layers see it."""

    redis: Any
    queue: str
    keys: QueueKeys
    settings: QueueSettings
    clock: Clock
    metrics: Metrics
    #: The queue's partition count (1: not partitioned).
    partitions: int = 1
    #: Which partition this context is a view of; None for the whole queue.
    partition: int | None = None
    #: The URL the client was made from, if any (asyncio twins connect to it).
    url: str | None = None
    #: The durability level (store/durable.py LEVELS), None when not durable.
    durability: str | None = None
    durable_timeout_ms: int = 1000
    #: How long a sync call polls its socket for the reply (store/direct.py).
    spin_us: int = DEFAULT_SPIN_US
    #: Registered tasks by name (worker.tasks.Task), shared with the App.
    tasks: dict[str, Any] = field(default_factory=dict)
    #: Declared payload types by task name (worker.payloads.Codec), checked at enqueue.
    payload_types: dict[str, Any] = field(default_factory=dict)
    #: Rules declared in code (App.declare) for the whole queue, shared with every view.
    declared: dict[str, dict[str, Any]] = field(default_factory=dict)
    shared: SharedState = field(default_factory=SharedState)

    @property
    def durable(self) -> bool:
        return self.durability is not None

    @cached_property
    def scripts(self) -> Scripts:
        """This context's scripts (made on first use; each view has its own direct path)."""
        s = Scripts(self.redis, spin_us=self.spin_us)
        self.shared.opened.append(s)
        return s

    def async_client(self) -> Any:
        """A new asyncio client of the same deployment (the URL's, or the client's settings)."""
        return async_client(self.url) if self.url else async_from_sync(self.redis)

    def view(self, i: int) -> QueueContext:
        """The context of partition `i`: same client, registries and shared state."""
        return replace(self, keys=QueueKeys(self.queue, i), partition=i)

    def views(self) -> list[QueueContext]:
        """One context per partition (made once per App); [self] when not partitioned."""
        if self.partitions == 1:
            return [self]
        if self.partition is not None:
            raise InvalidArgument(f"partition {self.partition} of {self.queue!r} is a view already")
        if self.shared.views is None:
            self.shared.views = [self.view(i) for i in range(self.partitions)]
        return self.shared.views

    def rule_home(self, schedule_id: str) -> QueueContext:
        """The context where rule `schedule_id` lives (its partition's, when partitioned)."""
        if self.whole_partitioned:
            return self.views()[_partitions.partition_for(schedule_id, self.partitions)]
        return self

    def rule_homes(self) -> list[QueueContext]:
        """Where rules live: every partition of a partitioned queue, else this context."""
        return self.views() if self.whole_partitioned else [self]

    @property
    def whole_partitioned(self) -> bool:
        """The whole of a partitioned queue (not a view of one partition)."""
        return self.partitions > 1 and self.partition is None

    def declared_here(self) -> dict[str, dict[str, Any]]:
        """The declared rules that live here: all of them, or those of this partition."""
        if self.partition is None:
            return self.declared
        return _partitions.declared_in(self.declared, self.partitions, self.partition)

    def claim_layout(self) -> None:
        """Check (once per App) the partition count against the one recorded in Redis."""
        if not self.shared.layout_checked:
            _partitions.claim_layout(self)

    def keys_for_run(self, run_id: str) -> QueueKeys:
        """The keys of the partition (or the queue) that holds run `run_id`."""
        self.claim_layout()
        if self.partitions == 1:
            return self.keys
        return QueueKeys(self.queue, _partitions.run_partition(run_id, self.partitions))

    def local_ms(self) -> int:
        """Now on the server's clock, for fields a process stamps itself (an envelope's
        scheduled_for): the injected clock's, else local time plus a measured offset."""
        now = self.clock.now_ms()
        if now is not None:
            return now
        st = self.shared.server_time
        if st is None or st.clock is not self.clock:
            st = self.shared.server_time = ServerTime(self.clock)
        if st.stale():
            st.measure(self.redis)
        return st.now_ms()

    def ride(self, what: str, call: Callable[[int], T]) -> T:
        """`call(attempt)`, retried through a failover or a lost connection for at most
        `settings.outage_retry_ms` (store/retrying.py); then RedisUnavailable."""
        return ride_through(call, bound_ms=self.settings.outage_retry_ms, what=what,
                            queue=self.queue, logger=log)  # fmt: skip


class _HasContext(Protocol):
    ctx: QueueContext


class InContext(Generic[V]):
    """A facade attribute kept in its owner's QueueContext (`App.queue` is `App.ctx.queue`):
    read there; setting it (a test's clock) gives the owner a context with the new value."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> InContext[V]: ...
    @overload
    def __get__(self, obj: _HasContext, owner: type) -> V: ...
    def __get__(self, obj: _HasContext | None, owner: type) -> V | InContext[V]:
        if obj is None:
            return self
        return cast(V, getattr(obj.ctx, self.name))

    def __set__(self, obj: _HasContext, value: V) -> None:
        change: dict[str, Any] = {self.name: value}
        obj.ctx = replace(obj.ctx, **change)
