"""`Delivery`: one stream entry handed to this worker (read, or reclaimed), and its parser.

Its one home: the reader, recovery, limits and cancel all use it, none of them the Worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any

from zsched.protocol.text import lossy_text
from zsched.worker.tasks import RunInfo


@dataclass
class Delivery:
    """One stream entry handed to this worker."""

    entry_id: str
    run_id: str
    raw: bytes
    due_ms: int | None
    deliveries: int = 1
    #: Cancel support (zsched/worker/cancel.py): the asyncio task executing it, its RunInfo,
    #: whether its handler is async, and whether a cancel request was seen.
    exec_task: asyncio.Task[None] | None = None
    info: RunInfo | None = None
    is_async: bool = False
    cancel_seen: bool = False
    #: Limits (zsched/worker/limits.py): the task, the run's limit key, whether it holds a share.
    task_name: str | None = None
    limit_key: str | None = None
    limited: bool = False
    #: Read ahead past `max_read_ahead_bytes`: `raw` was dropped (ids kept, still held) and is
    #: read again when a slot comes (ReadLoop.refill).
    spilled: bool = False
    #: A sync handler's call in the thread pool (`running()` while its thread runs it).
    thread: concurrent.futures.Future[None] | None = None


def from_entry(entry_id: Any, fields: dict[bytes, bytes]) -> Delivery:
    """The Delivery of one XREADGROUP entry (fields as the dispatch script wrote them)."""
    due = fields.get(b"due_ms")
    return Delivery(
        lossy_text(entry_id), lossy_text(fields.get(b"run_id", b"")), fields.get(b"envelope", b""),
        int(due) if due and due.isdigit() else None,
    )  # fmt: skip
