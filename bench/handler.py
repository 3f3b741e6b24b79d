"""The handler's work in every contender's consumers: a no-op, or milliseconds of I/O.

The io workloads (bench/workloads.py `e2e(..., handler=...)`) set `BENCH_HANDLER` for the
consumer processes they start: "" a no-op; "async:MS" the handler awaits a sleep of MS ms
(on the event loop: zsched's async task, the floor's, saq's, arq's, BullMQ's); "sync:MS" it
blocks for MS ms (`time.sleep`: zsched's sync task in its thread pool, the floor's thread
pool, Celery's threads, RQ's work horse). A sleep stands for the common handler, which waits
on a database or an HTTP call and holds its slot meanwhile. A peer without the asked kind
runs the one it has (the table states it): Node has no blocking sleep that leaves its loop
running, Celery and RQ no async handlers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time

ENV = "BENCH_HANDLER"


@functools.cache
def spec() -> tuple[str, float]:
    """(kind, seconds) of this process's handler: ("", 0.0) for the no-op (read once: the
    driver sets it before the process starts)."""
    raw = os.environ.get(ENV, "")
    if not raw:
        return "", 0.0
    kind, _, ms = raw.partition(":")
    if kind not in ("async", "sync") or not ms:
        raise ValueError(f"{ENV}={raw!r}: expected async:MS or sync:MS")
    return kind, float(ms) / 1000


def describe(handler: str) -> str:
    """How a handler spec reads in a table ("async:2" -> "awaits 2 ms")."""
    if not handler:
        return "no-op"
    kind, _, ms = handler.partition(":")
    return f"awaits {ms} ms" if kind == "async" else f"blocks {ms} ms (time.sleep)"


async def wait() -> None:
    """A handler's wait on its event loop, either kind asked (a peer with async handlers
    only); none for the no-op."""
    _, s = spec()
    if s:
        await asyncio.sleep(s)


def block() -> None:
    """A handler's blocking wait, either kind asked (a peer with sync handlers only); none
    for the no-op."""
    _, s = spec()
    if s:
        time.sleep(s)
