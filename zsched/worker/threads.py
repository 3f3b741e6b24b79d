"""`SyncPool`: the thread pool of sync handlers, whose results reach the event loop in batches.

`loop.run_in_executor` wakes the event loop once per call (`call_soon_threadsafe` writes to
the loop's self-pipe), and each wake is a hand-off of the GIL between a handler thread and
the loop. With millisecond handlers at concurrency 64 that is thousands of wakes a second,
on a 2-core host each a chance to wait for a CPU. Here a finishing thread adds its result to
a list and wakes the loop only when no wake is pending yet; the loop then settles every
result that came in meanwhile in one callback.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: A finished call: its future, whether it returned, and its value or exception.
_Done = tuple["asyncio.Future[Any]", bool, Any]


class SyncPool:
    """Runs sync calls in `threads` threads for one event loop; `submit` returns an asyncio
    future settled on that loop (cancelling it does not stop a call already running: a
    thread cannot be stopped; one still queued is dropped by `executor.shutdown`)."""

    def __init__(self, threads: int, prefix: str) -> None:
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=prefix)
        self._lock = threading.Lock()
        self._done: list[_Done] = []
        self._wake_pending = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Call `fn(*args)` in a thread; a future of its return value (or its exception)."""
        return self.start(fn, *args)[0]

    def start(
        self, fn: Callable[..., Any], *args: Any
    ) -> tuple[asyncio.Future[Any], concurrent.futures.Future[None]]:
        """As `submit`, with the call's own future too: `running()` while a thread runs it
        (after `executor.shutdown(cancel_futures=True)`, a call is either cancelled, running
        or done: nothing else can start)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        return fut, self.executor.submit(self._call, loop, fut, fn, args)

    def _call(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any],
              fn: Callable[..., Any], args: tuple[Any, ...]) -> None:  # fmt: skip
        try:
            done: _Done = (fut, True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting run, as a future would
            done = (fut, False, exc)
        with self._lock:
            self._done.append(done)
            if self._wake_pending:  # the loop has a wake coming: it settles this one too
                return
            self._wake_pending = True
        try:
            loop.call_soon_threadsafe(self._settle)
        except RuntimeError:  # the loop is closed (the worker stopped): nobody awaits it
            pass

    def _settle(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._wake_pending = False
        for fut, ok, value in done:
            if fut.done():  # cancelled meanwhile (shutdown)
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
