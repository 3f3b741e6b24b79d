"""The exception tree of zsched.

ZschedError ─┬ InvalidArgument (also a ValueError) ─ RuleError
             ├ ConfigError · PayloadError · UnknownTask
             ├ ScriptError  (unexpected reply, missing script, protocol mismatch)
             ├ NotFound     (also a LookupError: RunNotFound, ScheduleNotFound)
             ├ NotReplicated · RedisUnavailable (also a redis ConnectionError)
             └ EvictionPolicyError, DurabilityUnsupported (ConfigErrors)

The stdlib bases let callers catch the usual way: `except ValueError` catches every bad
argument, `except LookupError` every missing run or rule (docs/errors.md).

Raised by handlers, outside the tree: Retry(delay=None), Fail(reason).
"""

from __future__ import annotations

import math

import redis.exceptions


class ZschedError(Exception):
    """Base of every error zsched raises."""


class ConfigError(ZschedError):
    """A setting is unknown, missing or has a bad value."""


class InvalidArgument(ZschedError, ValueError):
    """A call was given a bad argument: the message names it and the value; `field` is the
    argument's name where one is to blame (None when it is the combination)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RuleError(InvalidArgument):
    """A recurring rule is invalid (bad expression, unknown zone, bad interval), or could not
    be written (it kept changing under a compare-and-set)."""


class UnreadableRule(RuleError):
    """A stored rule this zsched cannot decode (its spec corrupt or written by a newer zsched,
    or its state corrupt) was to be read or edited: it is left as stored, not overwritten.
    The stored rule is at fault, not the call's arguments; removing the rule still works."""

    #: Why the rule does not decode (the message without the schedule id and the advice).
    reason: str = ""


class PayloadError(ZschedError):
    """A payload or envelope cannot be encoded, decoded, or is too large."""


class UnknownTask(ZschedError):
    """A run names a task that this worker has not registered. Never raised out of zsched: a
    worker that meets such a run dead-letters it (reason `unknown task '<name>': not registered
    with this worker`, spelled by `named`) and goes on; raising would stop a worker over one
    run. Kept public as the name of that failure (docs/errors.md)."""

    @classmethod
    def named(cls, task: str) -> UnknownTask:
        """The error for task name `task`, with the dead-letter reason the protocol fixes."""
        exc = cls(f"unknown task {task!r}: not registered with this worker")
        exc.task = task
        return exc

    task: str = ""


class ScriptError(ZschedError):
    """A Lua script replied with something unexpected, or could not be loaded."""


class NotFound(ZschedError, LookupError):
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
            raise InvalidArgument(
                f"Retry delay must be finite seconds >= 0 or None, got {delay!r}", "delay"
            )
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
