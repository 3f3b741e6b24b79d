"""zsched's worker for Django tasks: one handler per Django task of the backend (the
allowlist), keeping the result record and sending Django's task_started/task_finished."""

from __future__ import annotations

import os
import socket
from typing import Any

import zsched.integrations.django.results as R
from zsched import App, Fail, current_run
from zsched.integrations.django.compat import TaskContext, signals


def worker_app(backend: Any, queue_name: str) -> App:
    """The App of one Django queue with every Django task of the backend registered."""
    app: App = backend.app_for(queue_name)
    for path, task in backend.tasks().items():
        if path not in app.tasks:
            app.task(name=path, max_attempts=backend.max_attempts, backoff=1.0)(
                make_handler(backend, task, queue_name)
            )
    return app


def make_handler(backend: Any, task: Any, queue_name: str) -> Any:
    """The handler of one Django task (sync: Django's Task.call also runs async functions)."""
    store = backend.store(queue_name)
    worker_id = f"{socket.gethostname()}:{os.getpid()}"

    def run(payload: Any) -> None:
        info = current_run()
        args, kwargs = _arguments(payload, info.run_id)
        record = store.read(info.run_id) or R.new_record(
            task.module_path, backend.alias, queue_name, task.priority, args, kwargs
        )  # a periodic task's fire has no record until its first attempt
        record = store.started(info.run_id, record, worker_id)
        result = backend.to_result(info.run_id, record)
        signals.task_started.send(type(backend), task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = R.to_json(value, f"the return value of {task.module_path}")
        except Exception as exc:
            last = info.attempt >= backend.max_attempts
            record = store.finished(info.run_id, record, "FAILED" if last else "READY", exc=exc)
            if last:
                signals.task_finished.send(type(backend),
                                           task_result=backend.to_result(info.run_id, record))  # fmt: skip
                raise Fail(f"{type(exc).__name__}: {exc}"[:1000]) from exc
            raise  # zsched retries it (MAX_ATTEMPTS > 1)
        record = store.finished(info.run_id, record, "SUCCESSFUL", value=value)
        signals.task_finished.send(
            type(backend), task_result=backend.to_result(info.run_id, record)
        )

    run.__qualname__ = run.__name__ = f"django_task_{task.func.__name__}"
    return run


def _arguments(payload: Any, run_id: str) -> tuple[list[Any], dict[str, Any]]:
    if not isinstance(payload, dict):
        raise Fail(f"run {run_id}: a Django task's payload must be a map, got {payload!r}"[:300])
    args, kwargs = payload.get("args") or [], payload.get("kwargs") or {}
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise Fail(f"run {run_id}: args must be a list and kwargs a map")
    return args, kwargs
