"""zsched — a durable scheduler for future work, built on Redis."""

from __future__ import annotations

from ._version import __version__
from .aio import AsyncApp
from .app import App, EnqueuedId
from .clock import Clock, FakeClock, SystemClock
from .config import DispatcherSettings, QueueSettings, WorkerSettings
from .controls import (
    CancelOutcome,
    CancelResult,
    EnqueueOutcome,
    RescheduleOutcome,
    RescheduleResult,
)
from .envelope import Envelope, Payload, QueueName, RunId, ScheduleId
from .errors import (
    ConfigError,
    DurabilityUnsupported,
    EvictionPolicyError,
    Fail,
    NotFound,
    NotReplicated,
    PayloadError,
    RedisUnavailable,
    Retry,
    RuleError,
    RunNotFound,
    ScheduleNotFound,
    ScriptError,
    UnknownTask,
    ZschedError,
)
from .inspect import DeadLetter, QueueStatus, RunStatus
from .rule_controls import ManualFire, ManualOutcome
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
    "CancelOutcome",
    "CancelResult",
    "DurabilityUnsupported",
    "EnqueuedId",
    "ManualFire",
    "ManualOutcome",
    "EnqueueOutcome",
    "RescheduleOutcome",
    "RescheduleResult",
    "Envelope",
    "EvictionPolicyError",
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
    "RedisUnavailable",
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
