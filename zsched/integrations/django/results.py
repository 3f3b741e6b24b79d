"""The result record of a Django task run: JSON in Redis (`django_result(run_id)`), written at
enqueue and by the worker at start and finish, read by `get_result`.

zsched's own run state is the authority for where a run is; this record adds what Django's
TaskResult carries beyond it (times, worker ids, errors, the return value).
"""

from __future__ import annotations

import json
import math
import traceback
from datetime import UTC, datetime
from typing import Any

from zsched.integrations.django.compat import module_path

#: A finished result is kept this long (s) unless OPTIONS["RESULT_TTL"] says otherwise.
DEFAULT_RESULT_TTL_S = 86_400


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def to_json(value: Any, what: str) -> Any:
    """`value` as JSON data (what Django's tasks framework allows); TypeError names `what`."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def new_record(task_path: str, alias: str, queue_name: str, priority: int, args: list[Any],
               kwargs: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {
        "task": task_path, "backend": alias, "queue_name": queue_name, "priority": priority,
        "args": args, "kwargs": kwargs, "status": "READY", "enqueued_at": now_iso(),
        "started_at": None, "finished_at": None, "last_attempted_at": None,
        "worker_ids": [], "errors": [], "return_value": None,
    }  # fmt: skip


def error_of(exc: BaseException) -> dict[str, str]:
    return {
        "exception_class_path": module_path(type(exc)),
        "traceback": "".join(traceback.format_exception(exc))[-20_000:],
    }


class Store:
    """Reads and writes result records on one zsched App's Redis."""

    def __init__(self, app: Any, ttl_s: float = DEFAULT_RESULT_TTL_S) -> None:
        self.app = app
        self.ttl_ms = max(1000, int(ttl_s * 1000))

    def _key(self, run_id: str) -> str:
        key: str = self.app.keys_for_run(run_id).django_result(run_id)
        return key

    def write(self, run_id: str, record: dict[str, Any], extra_ms: int = 0) -> None:
        ttl = self.ttl_ms + max(0, extra_ms)
        self.app.redis.set(self._key(run_id), json.dumps(record), px=ttl)

    def read(self, run_id: str) -> dict[str, Any] | None:
        raw = self.app.redis.get(self._key(run_id))
        if raw is None:
            return None
        rec: dict[str, Any] = json.loads(raw)
        return rec

    def started(self, run_id: str, record: dict[str, Any], worker_id: str) -> dict[str, Any]:
        t = now_iso()
        record.update(status="RUNNING", last_attempted_at=t)
        record["started_at"] = record.get("started_at") or t
        record["worker_ids"] = [*record.get("worker_ids", []), worker_id]
        self.write(run_id, record)
        return record

    def finished(self, run_id: str, record: dict[str, Any], status: str, *,
                 value: Any = None, exc: BaseException | None = None) -> dict[str, Any]:  # fmt: skip
        record.update(status=status, finished_at=now_iso(), return_value=value)
        if exc is not None:
            record["errors"] = [*record.get("errors", []), error_of(exc)]
        self.write(run_id, record)
        return record


def due_extra_ms(run_after: datetime | None) -> int:
    """How much longer than the TTL a record of a run due at `run_after` must live."""
    if run_after is None:
        return 0
    ms = (run_after - datetime.now(UTC)).total_seconds() * 1000
    return int(ms) if math.isfinite(ms) and ms > 0 else 0
