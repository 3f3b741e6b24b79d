"""What enqueue is given, checked: instants, delays, task names and run ids. Each error names
the argument and the value."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from zsched.clock import datetime_to_ms
from zsched.errors import InvalidArgument
from zsched.protocol.limits import MAX_INSTANT_MS, MAX_PAUSE_NOTE_BYTES, MAX_RUN_ID_BYTES


def check_names(task_name: str, run_id: str | None) -> None:
    """A task name is non-empty text; a run id (None: a fresh one is made) is non-empty UTF-8
    text of at most MAX_RUN_ID_BYTES bytes."""
    if not isinstance(task_name, str) or not task_name:
        raise InvalidArgument(
            f"task name must be a non-empty string, got {task_name!r}", "task_name"
        )
    if run_id is None:
        return
    if not isinstance(run_id, str) or not run_id:
        raise InvalidArgument(f"run_id must be a non-empty string, got {run_id!r}", "run_id")
    size = len(_utf8(run_id))
    if size > MAX_RUN_ID_BYTES:
        raise InvalidArgument(
            f"run_id is {size} bytes, over the limit of {MAX_RUN_ID_BYTES}", "run_id"
        )


def to_ms(run_at: datetime | float | int) -> int:
    """Epoch milliseconds of an aware datetime or of epoch seconds, up to the year 9999."""
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise InvalidArgument(
                f"run_at {run_at.isoformat()} is a naive datetime; pass an aware one "
                "(e.g. datetime.now(timezone.utc)) so the instant is unambiguous",
                "run_at",
            )
        ms = datetime_to_ms(run_at)
        if ms < 0:  # the scripts refuse negative instants: say so here, naming the field
            raise InvalidArgument(
                f"run_at {run_at.isoformat()} is before 1970-01-01T00:00:00Z", "run_at"
            )
        return ms
    if isinstance(run_at, bool) or not isinstance(run_at, int | float):
        raise InvalidArgument(
            f"run_at must be an aware datetime or epoch seconds, got {run_at!r}", "run_at"
        )
    if not math.isfinite(run_at) or run_at < 0:
        raise InvalidArgument(f"run_at must be finite epoch seconds >= 0, got {run_at!r}", "run_at")
    if run_at * 1000 > MAX_INSTANT_MS:  # the scripts refuse instants after 9999-12-31 too
        raise InvalidArgument(f"run_at {run_at!r} is after the year 9999", "run_at")
    return int(round(run_at * 1000))


def _utf8(run_id: str) -> bytes:
    try:
        return run_id.encode()
    except UnicodeEncodeError:  # lone surrogates, e.g. from bytes decoded with surrogateescape
        raise InvalidArgument(f"run_id {run_id!r} is not valid UTF-8 text", "run_id") from None


def delay_ms(delay: timedelta | float | int) -> int:
    """Milliseconds of a timedelta or of seconds, finite and >= 0."""
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"delay must be a timedelta or seconds, got {delay!r}", "delay")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(f"delay must be finite and >= 0 seconds, got {delay!r}", "delay")
    return int(round(seconds * 1000))


def check_pause_note(note: str | None) -> None:
    """A queue's pause note: None, or text of at most MAX_PAUSE_NOTE_BYTES bytes."""
    if note is not None and len(note.encode()) > MAX_PAUSE_NOTE_BYTES:
        raise InvalidArgument(f"a pause note is at most {MAX_PAUSE_NOTE_BYTES} bytes", "note")
