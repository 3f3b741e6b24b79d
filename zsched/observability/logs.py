"""Log lines about a run carry the run, and a JSON format for log collectors.

While a handler runs, `zsched.current_run()` is a context variable (tasks.py): the worker sets
it in the asyncio task of each run and in the thread of a sync handler. `RunContextFilter`
copies it onto every log record made in that context (the handler's own lines and the worker's
lines about the run): `run_id`, `task`, `attempt`, `queue`, `schedule_id`. A field given in
`extra=` wins. `JsonFormatter` writes one JSON object a line with those fields.

Both formatters pass the message, the exception text and every string field through
`redact_text`: a Redis URL's password never reaches a log line, whoever logged it.

`zsched --log-format json` (or `ZSCHED_LOG_FORMAT=json`) installs them for the CLI's processes;
an application calls `configure_logging("json")` or adds the filter and formatter to its own
handlers.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from zsched.config import log_format_from_env
from zsched.errors import InvalidArgument
from zsched.store.connection import redact_text

#: The formats `configure_logging` knows.
LOG_FORMATS = ("text", "json")
#: The fields about a run, in the order JSON lines carry them.
RUN_FIELDS = ("run_id", "task", "attempt", "queue", "schedule_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


#: The run a handler is executing (a zsched.RunInfo; the worker sets it): its fields go on
#: every log record made while it runs.
CURRENT_RUN: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "zsched_current_run", default=None
)


class RunContextFilter(logging.Filter):
    """Puts the current run's fields on each record (those `extra=` did not set)."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = CURRENT_RUN.get()
        if info is not None:
            values = {
                "run_id": info.run_id,
                "task": info.task,
                "attempt": info.attempt,
                "queue": info.queue,
                "schedule_id": info.schedule_id,
            }
            for name, value in values.items():
                if getattr(record, name, None) is None:
                    setattr(record, name, value)
        return True


class RedactingFormatter(logging.Formatter):
    """The text format, with credentials removed from the whole line."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the run fields
    present, any other `extra=` field, and `exc_info` as text. Credentials are redacted."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        for name in RUN_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        out.update(_extra(record.__dict__))
        if record.exc_info:
            out["exc_info"] = redact_text(self.formatException(record.exc_info))
        if record.stack_info:
            out["stack_info"] = redact_text(record.stack_info)
        return json.dumps(out, default=lambda v: redact_text(str(v)), ensure_ascii=False)


def _extra(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in attrs.items():
        if name in _STANDARD or name in RUN_FIELDS or name.startswith("_"):
            continue
        out[name] = redact_text(value) if isinstance(value, str) else value
    return out


def configure_logging(
    fmt: str | None = None, level: int = logging.WARNING
) -> logging.Handler | None:
    """Log to stderr in `fmt` ("text" or "json"; None: $ZSCHED_LOG_FORMAT, else text), with
    the run fields on every line about a run. Like logging.basicConfig, it does nothing (and
    returns None) when the root logger already has a handler it did not install."""
    fmt = (fmt or log_format_from_env() or "text").lower()
    if fmt not in LOG_FORMATS:
        raise InvalidArgument(
            f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}", "fmt"
        )
    root = logging.getLogger()
    if any(not getattr(h, "_zsched", False) for h in root.handlers):
        return None
    for old in root.handlers[:]:
        root.removeHandler(old)
    handler = logging.StreamHandler()
    handler._zsched = True  # type: ignore[attr-defined]
    handler.addFilter(RunContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else RedactingFormatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    return handler
