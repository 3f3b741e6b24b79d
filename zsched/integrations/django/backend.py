"""`ZschedBackend`: a `django.tasks` backend (Django 6, or the django-tasks backport) that puts
runs into zsched's delayed set; zsched's worker runs them (`manage.py zsched_worker`).

    TASKS = {"default": {
        "BACKEND": "zsched.integrations.django.ZschedBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:6379/0", ...},
    }}
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

import zsched.integrations.django.results as R
from zsched import App
from zsched.config import redis_url_from_env
from zsched.errors import RunNotFound
from zsched.integrations.django.compat import (
    BaseTaskBackend,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    signals,
)
from zsched.integrations.django.registry import discover

#: OPTIONS the backend reads; any other name is a configuration error.
OPTIONS = {
    "REDIS_URL": "zsched's Redis (default: $ZSCHED_REDIS_URL, else redis://127.0.0.1:6379/0)",
    "QUEUE_PREFIX": "prepended to a Django queue name to make the zsched queue name",
    "RESULT_TTL": "seconds a finished result is kept (default one day)",
    "ENQUEUE_ON_COMMIT": "inside a transaction, enqueue when it commits (default False)",
    "PERIODIC_TASKS": "schedule id -> {task, cron|every, tz, args, kwargs, ...rule options}",
    "TASK_MODULES": "modules with tasks besides each installed app's `tasks` module",
    "MAX_ATTEMPTS": "attempts of a failing task before it is FAILED (default 1, as Django)",
}
_STATUS = {"scheduled": "READY", "ready": "READY", "running": "RUNNING", "done": "SUCCESSFUL",
           "dead": "FAILED"}  # fmt: skip


class ZschedBackend(BaseTaskBackend):  # type: ignore[misc]
    """django.tasks on zsched: durable delayed runs, replicas-safe periodic tasks."""

    #: run_after goes into zsched's delayed set.
    supports_defer = True
    #: Async task functions run (Django's Task.call runs them to completion).
    supports_async_task = True
    #: Status, times, errors and the return value, kept RESULT_TTL seconds.
    supports_get_result = True
    #: zsched runs due work in due order; it has no priorities (a priority other than the
    #: default is refused by Django's validation).
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(OPTIONS))}"
            )
        self.url = self.options.get("REDIS_URL") or redis_url_from_env()
        self.prefix = str(self.options.get("QUEUE_PREFIX", ""))
        self.on_commit = bool(self.options.get("ENQUEUE_ON_COMMIT", False))
        self.result_ttl = float(self.options.get("RESULT_TTL", R.DEFAULT_RESULT_TTL_S))
        self.max_attempts = int(self.options.get("MAX_ATTEMPTS", 1))
        self._apps: dict[str, App] = {}
        self._lock = threading.Lock()
        self._known: dict[str, Any] = {}

    # -- zsched side -------------------------------------------------------------------------

    def zsched_queue(self, queue_name: str) -> str:
        """The zsched queue of a Django queue name."""
        return self.prefix + queue_name

    def app_for(self, queue_name: str) -> App:
        """The zsched App of one Django queue (made once per process)."""
        with self._lock:
            app = self._apps.get(queue_name)
            if app is None:
                app = self._apps[queue_name] = App(self.url, queue=self.zsched_queue(queue_name))
            return app

    def store(self, queue_name: str) -> R.Store:
        return R.Store(self.app_for(queue_name), self.result_ttl)

    def tasks(self) -> dict[str, Any]:
        """module path -> Task of this backend's tasks (the worker's allowlist)."""
        if not self._known:
            extra = self.options.get("TASK_MODULES", ())
            found = discover(extra)
            self._known = {p: t for p, t in found.items() if t.backend == self.alias}
        return self._known

    # -- enqueue -----------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        args = R.to_json(list(args), f"arguments of {task.module_path}")
        kwargs = R.to_json(dict(kwargs), f"keyword arguments of {task.module_path}")
        run_id = uuid.uuid4().hex
        result = TaskResult(
            task=task, id=run_id, status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, finished_at=None, last_attempted_at=None, args=args,
            kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip
        send: Callable[[], None] = lambda: self._send(task, result)  # noqa: E731
        if self.on_commit:
            from django.db import transaction

            transaction.on_commit(send)  # runs at once outside a transaction
        else:
            send()
        return result

    def _send(self, task: Any, result: Any) -> None:
        record = R.new_record(task.module_path, self.alias, task.queue_name, task.priority,
                              result.args, result.kwargs)  # fmt: skip
        self.store(task.queue_name).write(result.id, record, R.due_extra_ms(task.run_after))
        payload = {"args": result.args, "kwargs": result.kwargs}
        run_at = task.run_after
        if run_at is not None and run_at.tzinfo is None:  # USE_TZ = False: Django's local time
            from django.utils import timezone

            run_at = timezone.make_aware(run_at)
        self.app_for(task.queue_name).enqueue(task.module_path, payload, run_at=run_at,
                                              run_id=result.id)  # fmt: skip
        from django.utils.dateparse import parse_datetime

        object.__setattr__(result, "enqueued_at", parse_datetime(record["enqueued_at"]))
        signals.task_enqueued.send(type(self), task_result=result)

    # -- results -----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        for queue_name in sorted(self.queues) or ["default"]:
            record = self.store(queue_name).read(result_id)
            if record is not None:
                return self.to_result(
                    result_id, self._with_run_state(queue_name, result_id, record)
                )
        raise TaskResultDoesNotExist(result_id)

    def _with_run_state(
        self, queue_name: str, run_id: str, record: dict[str, Any]
    ) -> dict[str, Any]:
        # zsched knows where the run is; the record can lag (a worker killed mid-run, a run
        # dead-lettered before its handler started).
        try:
            state = self.app_for(queue_name).get_run(run_id).state
        except RunNotFound:
            return record
        if state == "dead" and record["status"] != "FAILED":
            record = {**record, "status": "FAILED"}
        elif record["status"] == "READY" and _STATUS.get(state) == "RUNNING":
            record = {**record, "status": "RUNNING"}
        return record

    def to_result(self, run_id: str, record: dict[str, Any]) -> Any:
        """A Django TaskResult from a stored record."""
        from django.utils.dateparse import parse_datetime

        task = self.tasks().get(record["task"])
        if task is None:
            raise TaskResultDoesNotExist(
                f"{run_id}: task {record['task']!r} is not a Django task of backend {self.alias!r}"
            )
        times = {k: parse_datetime(record[k]) if record.get(k) else None
                 for k in ("enqueued_at", "started_at", "finished_at", "last_attempted_at")}  # fmt: skip
        result = TaskResult(
            task=task, id=run_id, status=TaskResultStatus(record["status"]), **times,
            args=record["args"], kwargs=record["kwargs"], backend=self.alias,
            errors=[TaskError(**e) for e in record.get("errors", [])],
            worker_ids=list(record.get("worker_ids", [])),
        )  # fmt: skip
        object.__setattr__(result, "_return_value", record.get("return_value"))
        return result

    # -- periodic tasks ----------------------------------------------------------------------

    def declare_periodic(self) -> dict[str, list[str]]:
        """Declare OPTIONS["PERIODIC_TASKS"] on their queues' Apps (a dispatcher syncs them
        when it starts). Returns Django queue name -> schedule ids."""
        out: dict[str, list[str]] = {}
        for sid, spec in (self.options.get("PERIODIC_TASKS") or {}).items():
            rule = dict(spec)
            path = rule.pop("task", None)
            task = self.tasks().get(path) if isinstance(path, str) else None
            if task is None:
                raise ImproperlyConfigured(
                    f"PERIODIC_TASKS[{sid!r}]: task {path!r} is not a Django task of backend "
                    f"{self.alias!r} (a @task function in an installed app's tasks module)"
                )
            payload = {"args": R.to_json(list(rule.pop("args", [])), f"{sid} args"),
                       "kwargs": R.to_json(dict(rule.pop("kwargs", {})), f"{sid} kwargs")}  # fmt: skip
            queue_name = rule.pop("queue_name", task.queue_name)
            self.app_for(queue_name).declare(sid, path, payload=payload, **rule)
            out.setdefault(queue_name, []).append(sid)
        return out
