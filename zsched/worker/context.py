"""`WorkerContext`: what the worker's collaborators share (built once by `Worker`).

The queue's parts (keys, clock, settings, metrics, the task registry) and the worker's own:
its async clients, its script runner, its consumer name, the server clock it stamps with and
the outage its loops wait out together. Frozen: a collaborator keeps its state to itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsched.clock import Clock, ServerTime
from zsched.config import QueueSettings, WorkerSettings
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import QueueKeys
from zsched.store.retrying import Outage
from zsched.store.scripts import AsyncScripts
from zsched.worker.tasks import Task


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
