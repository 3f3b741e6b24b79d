"""Typed task handles: what `@app.task` returns.

`handle.enqueue(payload)` and `handle.schedule(schedule_id, payload, ...)` are checked by mypy
against the handler's payload type (`def send(order: Order)` makes `send.enqueue` take an
Order), and the handle is still the function: `send(order)` calls it, for tests.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from zsched.errors import Fail, InvalidArgument, PayloadError
from zsched.runs.enqueue import EnqueuedId
from zsched.worker.payloads import Codec

P = TypeVar("P")
R = TypeVar("R")


class Owner(Protocol):
    """What a handle uses of the App that registered it (the App's own methods)."""

    @property
    def queue(self) -> str: ...
    @property
    def tasks(self) -> dict[str, Any]: ...
    @property
    def payload_types(self) -> dict[str, Codec]: ...
    def enqueue(
        self,
        task_name: str,
        payload: Any = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        run_id: str | None = None,
    ) -> EnqueuedId: ...
    def schedule(self, schedule_id: str, task_name: str | None = None, **options: Any) -> int: ...
    def declare(self, schedule_id: str, task_name: str | None = None, **options: Any) -> None: ...


class TaskHandle(Generic[P, R]):
    """A registered task: call it like the function, enqueue or schedule runs of it."""

    def __init__(self, app: Owner, name: str, fn: Callable[[P], R], codec: Codec | None) -> None:
        self.app = app
        #: The task name runs carry on the wire.
        self.name = name
        #: The handler as written.
        self.fn = fn
        #: The declared payload type's codec (zsched.worker.payloads), or None.
        self.codec = codec
        functools.update_wrapper(self, fn)
        if inspect.iscoroutinefunction(fn):
            _mark_coroutine_function(self)

    def __call__(self, payload: P) -> R:
        """Call the handler directly (no Redis): for unit tests."""
        return self.fn(payload)

    def enqueue(
        self,
        payload: P,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        run_id: str | None = None,
    ) -> EnqueuedId:
        """App.enqueue of this task (a declared payload is checked and sent as plain data)."""
        return self.app.enqueue(self.name, payload, run_at=run_at, delay=delay, run_id=run_id)

    def schedule(self, schedule_id: str, payload: P | None = None, **options: Any) -> int:
        """App.schedule of a rule that runs this task with `payload` (cron=, every=, ...)."""
        wire = None if payload is None else self.wire(payload)
        return self.app.schedule(schedule_id, self.name, payload=wire, **options)

    def declare(self, schedule_id: str, payload: P | None = None, **options: Any) -> None:
        """App.declare of a rule that runs this task with `payload` (synced at dispatcher start)."""
        wire = None if payload is None else self.wire(payload)
        self.app.declare(schedule_id, self.name, payload=wire, **options)

    def wire(self, payload: P) -> Any:
        """The payload as it travels: plain msgpack data (checked if a type is declared)."""
        return payload if self.codec is None else self.codec.to_wire(payload)

    def __repr__(self) -> str:
        return f"<zsched task {self.name!r} of queue {self.app.queue!r}>"


def _mark_coroutine_function(obj: Any) -> None:
    """Make inspect/asyncio.iscoroutinefunction(handle) true for an async handler, as for
    the function itself: code that registers a handle, or inspects one, may ask."""
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
    if mark is not None:
        mark(obj)
    obj._is_coroutine = getattr(asyncio.coroutines, "_is_coroutine", None)  # asyncio's, 3.11


def decoding(fn: Callable[[Any], Any], codec: Codec) -> Callable[[Any], Any]:
    """The function the worker calls: rebuilds the declared type, then calls the handler. A
    payload that fails the check is a dead letter (Fail) with the validation error."""

    def rebuild(payload: Any) -> Any:
        try:
            return codec.from_wire(payload)
        except PayloadError as exc:
            raise Fail(f"invalid payload: {exc}") from exc

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(payload: Any) -> Any:
            return await fn(rebuild(payload))

        run_async._zsched_handler = fn  # type: ignore[attr-defined]
        return run_async

    @functools.wraps(fn)
    def run(payload: Any) -> Any:
        return fn(rebuild(payload))

    run._zsched_handler = fn  # type: ignore[attr-defined]
    return run


def register(app: Owner, fn: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
    """App.task: register `fn` (or return the decorator that does) and return its handle."""
    from zsched.worker.payloads import codec_for, declared_in
    from zsched.worker.tasks import make_task

    declared = options.pop("payload", None)

    def reg(f: Callable[..., Any]) -> TaskHandle[Any, Any]:
        base = f.fn if isinstance(f, TaskHandle) else f
        tp = declared or declared_in(base)
        codec = codec_for(tp) if tp is not None else None
        run = decoding(base, codec) if codec is not None else base
        t = make_task(run, **options)
        old = app.tasks.get(t.name)
        if old is not None and getattr(old.fn, "_zsched_handler", old.fn) is not base:
            raise InvalidArgument(
                f"task name {t.name!r} is already registered on {app.queue}", "name"
            )
        app.tasks[t.name] = t
        if codec is not None:
            app.payload_types[t.name] = codec
        else:
            app.payload_types.pop(t.name, None)
        return TaskHandle(app, t.name, base, codec)

    return reg(fn) if fn is not None else reg
