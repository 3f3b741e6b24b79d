"""What the store's functions need of a queue (QueueContext satisfies it), and the small
mutable state one App and its partition views share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from zsched.clock import ServerTime
from zsched.protocol.keys import QueueKeys
from zsched.store.scripts import Scripts


@dataclass
class SharedState:
    """Once-per-App facts and caches, shared by the App and its partition views (a context
    is frozen; this holder is the one thing in it that changes)."""

    #: The partition count was checked against (or recorded in) Redis (partitions.claim_layout).
    layout_checked: bool = False
    #: The server has WAITAOF (durable.check_level), for the fsync durability levels.
    level_checked: bool = False
    #: The measured offset from the server's clock (QueueContext.local_ms).
    server_time: ServerTime | None = None
    #: Every Scripts made for the App or a view: closed together (App.close).
    opened: list[Scripts] = field(default_factory=list)
    #: The cached labelled child of the enqueued counter: (metrics, child).
    enqueued_child: tuple[Any, Any] | None = None
    #: The partition views' contexts, made on first use (QueueContext.views).
    views: list[Any] | None = None

    def close(self) -> None:
        for s in self.opened:
            s.close()


class StoreTarget(Protocol):
    """One queue (or one partition of it) as the store sees it."""

    @property
    def redis(self) -> Any: ...
    @property
    def queue(self) -> str: ...
    @property
    def keys(self) -> QueueKeys: ...
    @property
    def partitions(self) -> int: ...
    @property
    def scripts(self) -> Scripts: ...
    @property
    def durability(self) -> str | None: ...
    @property
    def durable(self) -> bool: ...
    @property
    def durable_timeout_ms(self) -> int: ...
    @property
    def shared(self) -> SharedState: ...
