"""The exception tree of zsched.

ZschedError ─┬ ConfigError · RuleError · PayloadError · UnknownTask
             ├ ScriptError  (unexpected reply, missing script, protocol mismatch)
             ├ NotFound     (RunNotFound, ScheduleNotFound)
             ├ NotReplicated · RedisUnavailable (also a redis ConnectionError)
             └ EvictionPolicyError, DurabilityUnsupported (ConfigErrors)

Raised by handlers, outside the tree: Retry(delay=None), Fail(reason).
"""

from __future__ import annotations

import math

import redis.exceptions


class ZschedError(Exception):
    """Base of every error zsched raises."""


class ConfigError(ZschedError):
    """A setting is unknown, missing or has a bad value."""


class RuleError(ZschedError):
    """A recurring rule is invalid: bad expression, unknown zone, bad interval."""


class PayloadError(ZschedError):
    """A payload or envelope cannot be encoded, decoded, or is too large."""


class UnknownTask(ZschedError):
    """A run names a task that this worker has not registered."""


class ScriptError(ZschedError):
    """A Lua script replied with something unexpected, or could not be loaded."""


class NotFound(ZschedError):
    """The named object does not exist."""


class RunNotFound(NotFound):
    """No live or recently completed run has this id."""


class ScheduleNotFound(NotFound):
    """No recurring rule has this id."""


class Retry(Exception):  # noqa: N818 - a control-flow signal raised by handlers
    """Raise from a handler to retry the run, after `delay` seconds if given."""

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or delay < 0
        ):
            raise ValueError(f"Retry delay must be finite seconds >= 0 or None, got {delay!r}")
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Fail(Exception):  # noqa: N818 - a control-flow signal raised by handlers
    """Raise from a handler to send the run to the dead letters at once, without retries."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotReplicated(ZschedError):
    """A durable enqueue was written on the master but not acknowledged at its durability level
    in time (no replica held it, or it was not fsynced: the message says which)."""


class DurabilityUnsupported(ConfigError):
    """The durability level asked for needs a command the server lacks (WAITAOF before 7.2)."""


class RedisUnavailable(ZschedError, redis.exceptions.ConnectionError):
    """An enqueue or rule operation kept failing to reach Redis for longer than its bound
    (QueueSettings.outage_retry_ms). A redis ConnectionError too, so code that caught those
    before still does."""


class EvictionPolicyError(ConfigError):
    """Redis's maxmemory-policy may evict zsched's keys (runs and rules would vanish without a
    trace); a dispatcher or worker refuses to start unless allowed explicitly."""
