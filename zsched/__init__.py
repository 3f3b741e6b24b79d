"""zsched — a durable scheduler for future work, built on Redis."""

from __future__ import annotations

from zsched._version import __version__
from zsched.app import App, AsyncApp, EnqueuedId
from zsched.clock import Clock, FakeClock, SystemClock
from zsched.config import DispatcherSettings, QueueSettings, WorkerSettings
from zsched.errors import (
    ConfigError,
    DurabilityUnsupported,
    EvictionPolicyError,
    Fail,
    InvalidArgument,
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
    UnreadableRule,
    ZschedError,
)
from zsched.protocol.envelope import Envelope, Payload, QueueName, RunId, ScheduleId
from zsched.protocol.replies import ScheduleResult
from zsched.rules.controls import ManualFire, ManualOutcome
from zsched.rules.triggers import Cron, Every
from zsched.runs.controls import (
    CancelOutcome,
    CancelResult,
    EnqueueOutcome,
    RescheduleOutcome,
    RescheduleResult,
)
from zsched.runs.status import DeadLetter, QueueStatus, RunStatus
from zsched.worker.tasks import RunInfo, current_run

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
    "InvalidArgument",
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
    "ScheduleResult",
    "ScriptError",
    "SystemClock",
    "UnknownTask",
    "UnreadableRule",
    "WorkerSettings",
    "ZschedError",
    "__version__",
    "current_run",
]
