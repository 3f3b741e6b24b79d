"""zsched — a durable scheduler for future work, built on Redis."""

from __future__ import annotations

from ._version import __version__
from .aio import AsyncApp
from .app import App, EnqueuedId
from .clock import Clock, FakeClock, SystemClock
from .config import DispatcherSettings, QueueSettings, WorkerSettings
from .envelope import Envelope, Payload, QueueName, RunId, ScheduleId
from .errors import (
    ConfigError,
    Fail,
    NotFound,
    NotReplicated,
    PayloadError,
    Retry,
    RuleError,
    RunNotFound,
    ScheduleNotFound,
    ScriptError,
    UnknownTask,
    ZschedError,
)
from .inspect import DeadLetter, QueueStatus, RunStatus
from .rules import Cron, Every
from .tasks import RunInfo, current_run

__all__ = [
    "App",
    "AsyncApp",
    "Clock",
    "ConfigError",
    "Cron",
    "DeadLetter",
    "DispatcherSettings",
    "EnqueuedId",
    "Envelope",
    "Every",
    "Fail",
    "FakeClock",
    "NotFound",
    "NotReplicated",
    "Payload",
    "PayloadError",
    "QueueName",
    "QueueSettings",
    "QueueStatus",
    "Retry",
    "RuleError",
    "RunId",
    "RunInfo",
    "RunNotFound",
    "RunStatus",
    "ScheduleId",
    "ScheduleNotFound",
    "ScriptError",
    "SystemClock",
    "UnknownTask",
    "WorkerSettings",
    "ZschedError",
    "__version__",
    "current_run",
]
