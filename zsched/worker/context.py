"""`WorkerContext`: what the worker's collaborators share (built once by `Worker`).

The queue's parts, taken from its QueueContext (keys, clock, settings, metrics, the task
registry), and the worker's own: its async clients, its script runner, its consumer name,
the server clock it stamps with and the outage its loops wait out together. Frozen: a
collaborator keeps its state to itself. The queue's parts are copied into fields (not read
through the QueueContext) because the per-run path reads them.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zsched.clock import Clock, ServerTime
from zsched.config import QueueSettings, WorkerSettings
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import QueueKeys
from zsched.store.retrying import Outage
from zsched.store.scripts import AsyncScripts
from zsched.worker.tasks import Task

if TYPE_CHECKING:
    from zsched.context import QueueContext


@dataclass(frozen=True, eq=False)
class WorkerContext:
    """The parts every collaborator of one Worker reads (none of them writes one)."""

    queue: str
    keys: QueueKeys
    clock: Clock
    #: The queue's settings (the dedupe window the ack and discard scripts keep).
    queue_settings: QueueSettings
    settings: WorkerSettings
    metrics: Metrics
    #: Task name -> Task: the only names this worker runs (invariant 7).
    tasks: dict[str, Task]
    #: The async client for scripts and short commands.
    redis: Any
    #: The client of the blocking reads (its own connection, unless one client was given).
    reader: Any
    scripts: AsyncScripts
    consumer: str
    #: The server's clock for start lags and retry due times (invariant 3).
    server_time: ServerTime
    #: The worker's loops wait out a Redis outage together and log it once.
    outage: Outage

    @classmethod
    def of(cls, base: QueueContext, settings: WorkerSettings, redis: Any = None,
           consumer: str | None = None) -> WorkerContext:  # fmt: skip
        """The context of a Worker of `base`'s queue (or partition). `redis`: one asyncio
        client for everything (else two new ones: blocking reads hold their connection)."""
        client = redis if redis is not None else base.async_client()
        reader = client if redis is not None else base.async_client()
        return cls(
            queue=base.queue, keys=base.keys, clock=base.clock, queue_settings=base.settings,
            settings=settings, metrics=base.metrics, tasks=base.tasks, redis=client,
            reader=reader, scripts=AsyncScripts(client),
            consumer=consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}",
            server_time=ServerTime(base.clock),
            outage=Outage(logging.getLogger("zsched.worker.worker"), "worker", base.queue),
        )  # fmt: skip
