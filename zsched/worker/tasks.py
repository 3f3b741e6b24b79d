"""Registered tasks, the handler protocol, and `current_run()`.

A worker runs only task names registered here: nothing named by a payload is imported.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypedDict

from zsched.errors import InvalidArgument, ZschedError
from zsched.observability.logs import CURRENT_RUN
from zsched.protocol.envelope import Payload
from zsched.protocol.limits import DEFAULT_MAX_RESULT_BYTES, MAX_TASK_BYTES
from zsched.worker.limits import Limits, make_limits


class Handler(Protocol):
    """A task body: takes the payload; sync or async."""

    def __call__(self, payload: Payload, /) -> Any | Awaitable[Any]: ...


#: Backoff: base seconds (exponential, full jitter) or a function attempt -> seconds.
Backoff = float | Callable[[int], float]


@dataclass(frozen=True)
class Task:
    """A registered task."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    max_attempts: int | None = None
    backoff: Backoff = 1.0
    timeout: float | None = None
    #: Keep each run's outcome (attempts, duration, return value) for the dedupe window.
    keep_result: bool = False
    #: Largest return value kept (msgpack bytes); a larger one is recorded as an error.
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    #: Concurrency and rate limits shared by all workers (zsched/worker/limits.py); None = none.
    limits: Limits | None = None

    def backoff_seconds(self, attempt: int, max_seconds: float) -> float:
        """Delay before attempt `attempt + 1`: base * 2^(attempt-1), with full jitter."""
        if callable(self.backoff):
            chosen: float = float(self.backoff(attempt))
            return max(0.0, min(chosen, max_seconds))
        cap: float = min(float(self.backoff) * 2.0 ** (attempt - 1), max_seconds)
        # Half fixed, half random: spreads a thundering herd yet keeps the delay growing.
        return cap / 2 + random.uniform(0, cap / 2)


class TaskOptions(TypedDict, total=False):
    """@app.task's options, as make_task takes them (its defaults and checks)."""

    name: str | None
    max_attempts: int | None
    backoff: Backoff
    timeout: float | None
    keep_result: bool
    max_result_bytes: int
    max_concurrency: int | None
    rate: str | float | None
    burst: int | None
    limit_key: Callable[[Any], Any] | None


def make_task(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    max_attempts: int | None = None,
    backoff: Backoff = 1.0,
    timeout: float | None = None,
    keep_result: bool = False,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    max_concurrency: int | None = None,
    rate: str | float | None = None,
    burst: int | None = None,
    limit_key: Callable[[Any], Any] | None = None,
) -> Task:
    task_name = name or f"{fn.__module__}.{fn.__qualname__}"
    if not task_name or len(task_name.encode()) > MAX_TASK_BYTES:
        raise InvalidArgument(f"task name {task_name!r} must be 1..{MAX_TASK_BYTES} bytes", "name")
    if max_attempts is not None and max_attempts < 1:
        raise InvalidArgument(
            f"task {task_name}: max_attempts must be >= 1, got {max_attempts}", "max_attempts"
        )
    if timeout is not None and not timeout > 0:
        raise InvalidArgument(
            f"task {task_name}: timeout must be > 0 seconds, got {timeout}", "timeout"
        )
    if not callable(backoff) and not float(backoff) >= 0:
        raise InvalidArgument(
            f"task {task_name}: backoff must be >= 0 seconds, got {backoff}", "backoff"
        )
    if not (isinstance(max_result_bytes, int) and max_result_bytes >= 0):
        raise InvalidArgument(
            f"task {task_name}: max_result_bytes must be a whole number >= 0", "max_result_bytes"
        )
    is_async = inspect.iscoroutinefunction(fn) or asyncio.iscoroutinefunction(fn)
    limits = make_limits(task_name, max_concurrency, rate, burst, limit_key)
    return Task(task_name, fn, is_async, max_attempts, backoff, timeout, bool(keep_result),
                max_result_bytes, limits)  # fmt: skip


@dataclass(frozen=True)
class RunInfo:
    """What a handler knows about the run it is executing."""

    run_id: str
    task: str
    attempt: int
    scheduled_for: datetime
    queue: str
    schedule_id: str | None = None
    #: How many times the stream delivered this attempt (> 1 after a reclaim).
    deliveries: int = 1
    #: When the dispatcher put this attempt on the stream (Redis clock).
    dispatched_at: datetime | None = None
    # Set by the worker when a cancel of this run was requested (a list: the info is frozen).
    _cancel: list[bool] = field(default_factory=lambda: [False], repr=False, compare=False)

    @property
    def cancel_requested(self) -> bool:
        """True once `app.cancel(run_id)` asked this run to stop: a sync handler checks it
        and returns (or raises) at its next safe point; the run then ends `cancelled`."""
        return self._cancel[0]


def run_info(run_id: str, task: str, attempt: int, scheduled_for: datetime, queue: str,
             schedule_id: str | None, deliveries: int,
             dispatched_at: datetime | None) -> RunInfo:  # fmt: skip
    """`RunInfo(...)` with every field given, built as the worker does once per run: the
    frozen dataclass's __init__ sets each field through object.__setattr__, ~2.5x slower than
    filling its __dict__ at once (tests check the two are equal)."""
    info = object.__new__(RunInfo)
    info.__dict__.update(run_id=run_id, task=task, attempt=attempt, scheduled_for=scheduled_for,
                         queue=queue, schedule_id=schedule_id, deliveries=deliveries,
                         dispatched_at=dispatched_at, _cancel=[False])  # fmt: skip
    return info


_current: contextvars.ContextVar[RunInfo | None] = CURRENT_RUN  # read by log records too


def current_run() -> RunInfo:
    """The run being executed by this handler. Raises outside a handler."""
    info = _current.get()
    if info is None:
        raise ZschedError("current_run() is only available inside a task handler")
    return info


def set_current(info: RunInfo | None) -> contextvars.Token[RunInfo | None]:
    return _current.set(info)
