"""The interface every benchmarked queue implements, and zsched's own implementation.

A contender enqueues runs from the driver process and names the consumer processes that
handle them; the workloads (bench/workloads.py) do the rest identically for every contender.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Protocol

from .common import ROOT, Proc

#: One run to enqueue: (intended epoch ms, payload).
Item = tuple[int, dict[str, Any]]


class Contender(Protocol):
    name: str
    #: False when the library has no batched enqueue (the workload then says "–").
    has_batch: bool
    #: One line: the configuration used, for the report.
    config: str

    def open(self, url: str, queue: str) -> None: ...
    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None: ...
    def enqueue_many(self, items: list[Item]) -> None: ...
    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]: ...
    def close(self) -> None: ...


def py_module(module: str, *args: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", module, *args]


#: The worker configuration the benchmark uses for zsched's no-op handlers. concurrency is
#: the number of handlers in flight; no-op async handlers need many to keep the batches full.
ZSCHED_WORKER = {"concurrency": 1000, "read_batch": 500}
ZSCHED_DISPATCHER: dict[str, int] = {}  # the defaults: 500 runs per call


#: Every worker setting that bounds what a worker reads and holds: the config line states
#: each (issue 25 F1), the ones not given being WorkerSettings' defaults.
SHOWN_WORKER = ("concurrency", "read_batch", "read_ahead", "max_read_ahead_bytes",
                "max_unwritten_acks")  # fmt: skip


def _defaults() -> tuple[dict[str, int], dict[str, int]]:
    """The worker and dispatcher settings `zsched worker` / `zsched dispatcher` run with no
    flags, as the config line states them."""
    from zsched.config import DispatcherSettings, WorkerSettings

    w, d = WorkerSettings(), DispatcherSettings()
    return {k: getattr(w, k) for k in SHOWN_WORKER}, {"batch_size": d.batch_size}


class Zsched:
    """zsched through its public API; one dispatcher process plus N worker processes."""

    name = "zsched"
    has_batch = True

    def __init__(
        self,
        worker: dict[str, int] | None = None,
        dispatcher: dict[str, int] | None = None,
        sync: bool = False,
        dedupe_ms: int | None = None,
        cli_defaults: bool = False,
        embedded: bool = False,
    ) -> None:
        #: embedded: the dispatcher runs inside each worker process (one process per run's
        #: path, as the bare minimum has), instead of a process of its own.
        self.embedded = embedded
        self.dedupe_ms = dedupe_ms
        # cli_defaults: what `zsched worker` runs with no flags (WorkerSettings' defaults).
        self.worker = {**({} if cli_defaults else ZSCHED_WORKER), **(worker or {})}
        self.dispatcher = {**ZSCHED_DISPATCHER, **(dispatcher or {})}
        self.sync = sync
        worker_defaults, dispatcher_defaults = _defaults()
        shown = {**worker_defaults, **self.worker}
        self.settings = {"worker": shown, "dispatcher": {**dispatcher_defaults, **self.dispatcher}}
        self.config = (
            f"1 dispatcher process + N worker processes, worker {shown}, "
            f"dispatcher {self.settings['dispatcher']}{', sync handler' if sync else ''}"
            f"{', the dispatcher inside the worker process' if embedded else ''}"
        )
        self.app: Any = None

    def open(self, url: str, queue: str) -> None:
        import zsched
        from zsched.observability.metrics import Metrics

        self.app = zsched.App(url, queue=queue, metrics=Metrics())
        # The entry shape a queue of a 0.4 deployment has once its first worker started (its
        # start creates the group and chooses tagged; docs/operations.md). Here the consumers
        # start after the runs are due, so the dispatcher would move many in the plain shape
        # before the worker's start chose: a new queue's first moments, not a running one.
        self.app.set_entry_shape("tagged")

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        self.app.enqueue("noop", payload, run_at=due_ms / 1000)

    def enqueue_many(self, items: list[Item]) -> None:
        self.app.enqueue_many(
            {"task": "noop", "payload": p, "run_at": due / 1000} for due, p in items
        )

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        base = ["--url", url, "--queue", queue]
        if self.dedupe_ms is not None:
            base += ["--dedupe-ms", str(self.dedupe_ms)]
        procs = [
            Proc(
                py_module(
                    "bench.zsched_proc",
                    "dispatcher",
                    *base,
                    "--settings",
                    json.dumps(self.dispatcher),
                ),
                cwd=str(ROOT),
            )
        ]
        if self.embedded:
            procs = []
        for _ in range(workers):
            extra = ["--lags", str(lags)] if lags else []
            if self.sync:
                extra.append("--sync")
            procs.append(
                Proc(
                    py_module(
                        "bench.zsched_proc",
                        "both" if self.embedded else "worker",
                        *base,
                        "--settings",
                        json.dumps(self.worker),
                        *extra,
                    ),
                    cwd=str(ROOT),
                )
            )
        return procs

    def acked(self) -> int:
        return int(self.app.redis.hget(self.app.keys.stats, "acked") or 0)

    def close(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = None


class ZschedAsync(Zsched):
    """zsched with its asyncio client (zsched.AsyncApp) on the enqueue side, one awaited call
    after another inside one coroutine on a running loop (as an async web app awaits them;
    `enqueue_ones`), the batch as one awaited enqueue_many; the consumers are zsched's (CLI
    defaults)."""

    name = "zsched"

    def __init__(self) -> None:
        super().__init__(cli_defaults=True)
        self.config = "zsched.AsyncApp enqueue (await, one call at a time); " + self.config
        self.loop: Any = None
        self.aio: Any = None

    def open(self, url: str, queue: str) -> None:
        import asyncio

        import zsched

        super().open(url, queue)
        self.loop = asyncio.new_event_loop()
        self.aio = zsched.AsyncApp(url, queue)

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        self.loop.run_until_complete(self.aio.enqueue("noop", payload, run_at=due_ms / 1000))

    def enqueue_ones(self, items: list[Item]) -> None:
        async def each() -> None:
            for due, p in items:
                await self.aio.enqueue("noop", p, run_at=due / 1000)

        self.loop.run_until_complete(each())

    def enqueue_many(self, items: list[Item]) -> None:
        runs = [{"task": "noop", "payload": p, "run_at": due / 1000} for due, p in items]
        self.loop.run_until_complete(self.aio.enqueue_many(runs))

    def close(self) -> None:
        if self.aio is not None:
            self.loop.run_until_complete(self.aio.aclose())
            self.loop.close()
            self.aio = self.loop = None
        super().close()
