"""A workload that keeps enqueueing, dispatching and executing while a master dies.

`Workload` runs, in the test's event loop, a dispatcher and a worker per queue (one per
partition each), and in threads one enqueuer per queue that enqueues small batches and notes
which runs were acknowledged. Every execution is recorded with its time, so a test can tell
what was lost (acknowledged but never executed), what ran twice, and how long dispatching
stalled around the failure.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import zsched
from zsched.observability.metrics import Metrics
from zsched.store.connection import RETRYABLE_ERRORS


@dataclass
class Lane:
    """One queue under load: what its enqueuer got acknowledged, what its workers executed."""

    app: zsched.App
    acked: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    executed: Counter[str] = field(default_factory=Counter)
    times: list[tuple[float, str]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def lost(self) -> set[str]:
        return set(self.acked) - set(self.executed)

    @property
    def twice(self) -> int:
        return sum(1 for n in self.executed.values() if n > 1)

    def acked_after(self, t: float) -> list[str]:
        return [r for r in self.acked if float(r.rsplit("-", 1)[1]) > t]

    def describe(self, run_ids: list[str]) -> list[str]:
        """Where each run is now (for failure messages)."""
        out = []
        for rid in run_ids:
            try:
                out.append(f"{rid}: {self.app.get_run(rid).state}")
            except zsched.RunNotFound:
                out.append(f"{rid}: not found")
        return out

    def gap(self, start: float, partitions: set[int] | None = None) -> float:
        """Longest pause between executions (of `partitions`) that spans `start`."""
        ts = [t for t, rid in self.times
              if partitions is None or self.app.run_partition(rid) in partitions]  # fmt: skip
        before = max((t for t in ts if t <= start), default=start)
        after = min((t for t in ts if t > start), default=float("inf"))
        return after - before


class Workload:
    """Dispatchers, workers and enqueuers for some lanes; `stop()` ends them."""

    def __init__(self, url: str, queues: dict[str, dict[str, Any]], batch: int = 5,
                 pause_s: float = 0.005, visibility_ms: int = 2000) -> None:  # fmt: skip
        self.lanes: dict[str, Lane] = {}
        for q, opts in queues.items():
            # A failover plus the harness's heal (the old master restarted as a replica, so
            # durable writes are acknowledged again) took over the default 10 s on a loaded
            # 2-core CI runner: enqueue then raised. What these tests assert is that enqueue
            # rides a failover out within its bound, not how fast this machine heals.
            opts = {"settings": zsched.QueueSettings(outage_retry_ms=60_000), **opts}
            app = zsched.App(url, queue=q, metrics=Metrics(), **opts)
            lane = Lane(app)
            app.task(name="record")(self._recorder(lane))
            self.lanes[q] = lane
        self.batch, self.pause_s, self.visibility_ms = batch, pause_s, visibility_ms
        self._stop_enqueue = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stop = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._procs: list[Any] = []

    @staticmethod
    def _recorder(lane: Lane) -> Any:
        async def record(payload: object) -> None:
            rid = zsched.current_run().run_id
            lane.executed[rid] += 1
            lane.times.append((time.monotonic(), rid))

        return record

    def _enqueue_loop(self, name: str, lane: Lane) -> None:
        n = 0
        while not self._stop_enqueue.is_set():
            # The id carries its enqueue time so a test can select runs by when they came.
            ids = [f"{name}{n + i}-{time.monotonic():.6f}" for i in range(self.batch)]
            n += self.batch
            try:
                lane.app.enqueue_many([{"task": "record", "run_id": r} for r in ids])
                lane.acked.extend(ids)
            except (zsched.NotReplicated, *RETRYABLE_ERRORS) as exc:
                lane.refused.extend(ids)
                lane.errors[type(exc).__name__] += 1
                self._stop_enqueue.wait(0.05)
            self._stop_enqueue.wait(self.pause_s)

    async def start(self) -> None:
        for lane in self.lanes.values():
            d = lane.app.dispatcher()
            w = lane.app.worker(concurrency=16, visibility_timeout_ms=self.visibility_ms)
            self._procs += [d, w]
            self._loops += [asyncio.create_task(d.run(self._stop)),
                            asyncio.create_task(w.run(self._stop))]  # fmt: skip
        for i, lane in enumerate(self.lanes.values()):
            t = threading.Thread(target=self._enqueue_loop, args=(f"L{i}.", lane), daemon=True)
            t.start()
            self._threads.append(t)

    async def until(self, cond: Any, timeout: float, what: str) -> None:
        """Poll `cond` without blocking the loop; a safety net, not a timing assertion."""
        deadline = time.monotonic() + timeout
        while not cond():
            for t in self._loops:
                if t.done() and not self._stop.is_set():
                    raise AssertionError(f"a dispatcher or worker loop ended: {t!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.05)

    def stop_enqueueing(self) -> None:
        self._stop_enqueue.set()
        for t in self._threads:
            t.join(10)

    async def stop(self) -> None:
        self.stop_enqueueing()
        self._stop.set()
        await asyncio.gather(*self._loops, return_exceptions=True)
        for p in self._procs:
            await p.close()
        for lane in self.lanes.values():
            lane.app.close()

    def drained(self, lane: Lane) -> bool:
        st = lane.app.status()
        return st.delayed == 0 and st.stream_length == 0 and st.pending == 0
