"""The workloads of the issue's table, written once for every contender.

Each returns a dict of numbers. Each starts a fresh private redis-server so memory, command
counts and the slow log belong to that workload alone, and each is bounded by a timeout.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .common import (
    BenchError,
    Proc,
    client,
    commands_processed,
    cpu_seconds,
    now_ms,
    payload,
    percentile,
    read_lags,
    server,
    tree_pids,
    used_memory,
    wait_count,
    wait_ready,
)
from .contender import Contender
from .cost import meter_for
from .handler import ENV

HOUR_MS = 3_600_000
READY_TIMEOUT = 30.0


def _queue() -> str:
    return "b" + uuid.uuid4().hex[:8]


def _stop(procs: list[Proc]) -> None:
    for p in procs:
        p.stop()


def _start(procs: list[Proc], handler: str) -> list[Proc]:
    """Start the consumer processes with `handler` in their environment (bench/handler.py)."""
    for p in procs:
        p.env = {**(p.env or {}), ENV: handler}
        p.start()
    return procs


def _enqueue_all(c: Contender, items: list[tuple[int, dict[str, Any]]]) -> None:
    if c.has_batch:
        for i in range(0, len(items), 10_000):
            c.enqueue_many(items[i : i + 10_000])
    else:
        for due, p in items:
            c.enqueue_one(due, p)


def e2e(
    c: Contender, n: int = 20_000, workers: int = 1, timeout: float = 120.0, handler: str = ""
) -> dict[str, Any]:
    """Runs/s from the first handler call to the last, for `n` runs already due when the
    consumers start (enqueued while no consumer runs). `handler`: the consumers' handler
    (bench/handler.py: "" the no-op, "async:2" awaits 2 ms, "sync:2" blocks 2 ms)."""
    with server() as srv:
        q = _queue()
        c.open(srv.url, q)
        due = now_ms() + 300
        try:
            _enqueue_all(c, [(due, payload(due, i)) for i in range(n)])
            # Every run is due before any consumer starts, and went through the delayed path.
            time.sleep(max(0.0, (due - now_ms()) / 1000) + 0.2)
            meter = meter_for(srv)
            meter.start()  # the drain: dispatch + read + ack (+ the consumers' start-up)
            procs = _start(c.consumers(srv.url, q, workers, None), handler)
            try:
                t0 = time.time()
                wait_ready(procs, READY_TIMEOUT)
                pids = [pid for p in procs for pid in tree_pids(p.pid)]
                cpu0 = sum(cpu_seconds(p) for p in pids)
                count, first, last = wait_count(procs, n, timeout)
                cpu = sum(cpu_seconds(p) for p in pids) - cpu0
                drain = meter.stop()
            finally:
                _stop(procs)
                meter.r.close()
            extra: dict[str, Any] = {}
            if hasattr(c, "acked"):
                extra["acked"] = c.acked()
        finally:
            c.close()
    if count < min(n, 100):
        raise BenchError(f"{c.name} e2e: handled {count} of {n} runs within {timeout}s")
    # A slow contender is measured on what it handled within the timeout (partial=True).
    rate = (count - 1) / max(last - first, 1e-9)
    return {
        "runs_per_s": rate,
        "partial": count < n,
        "n": n,
        "workers": workers,
        "handler": handler,
        # The consumer processes' CPU (every process and thread, the dispatcher's too) from
        # ready to the last handler call, per run: their own work, less moved by the load
        # than a rate (clock ticks: 10 ms resolution).
        "consumer_cpu_us_per_run": 1e6 * cpu / max(count, 1),
        "wall_s": last - t0,
        "handled": count,
        **drain.per_run(count, "drain"),
        **extra,
    }


def _favour(procs: list[Proc]) -> None:
    """nice -10 for every consumer process (and its children), as for redis-server, when
    root: on a shared machine the lag tail is otherwise the other tenants' load (time off the
    CPU, BENCHMARKS.md "Where the lag tail comes from"). Every contender gets the same."""
    for p in procs:
        for pid in tree_pids(p.pid):
            try:  # nice is per thread on Linux: every thread of the process
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                tids = [pid]
            for tid in tids:
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, -10)
                except OSError:
                    pass


def lag(
    c: Contender, rate: int = 200, seconds: float = 5.0, lead_s: float = 1.5, timeout: float = 60.0
) -> dict[str, Any]:
    """Fire lag (ms from a run's intended time to its handler call) at a steady `rate`.

    The consumers run first; a producer in the driver enqueues each run `lead_s` before it is
    due, in small batches, so the stream of due runs is steady."""
    n = max(1, int(rate * seconds))
    with server() as srv, tempfile.TemporaryDirectory(prefix="zsched-bench-") as tmp:
        q = _queue()
        c.open(srv.url, q)
        lags_path = Path(tmp) / "lags"
        procs = [p.start() for p in c.consumers(srv.url, q, 1, lags_path)]
        try:
            wait_ready(procs, READY_TIMEOUT)
            _favour(procs)
            time.sleep(0.5)  # let every consumer reach its blocking read
            t0 = now_ms() + int(lead_s * 1000)
            dues = [t0 + int(i * 1000 / rate) for i in range(n)]
            sent, behind = 0, 0
            while sent < n:
                horizon = now_ms() + int(lead_s * 1000)
                chunk = []
                while sent < n and dues[sent] <= horizon:
                    chunk.append((dues[sent], payload(dues[sent], sent)))
                    sent += 1
                if chunk:
                    if chunk[0][0] < now_ms():
                        behind += 1
                    _enqueue_all(c, chunk)
                time.sleep(0.02)
            count, _, _ = wait_count(procs, n, timeout + lead_s + seconds)
        finally:
            _stop(procs)
            c.close()
        lags = read_lags(lags_path) + [lag for p in procs for lag in p.lags]
    if count < n:
        raise BenchError(f"{c.name} lag: handled {count} of {n} runs")
    return {
        "p50_ms": percentile(lags, 50),
        "p99_ms": percentile(lags, 99),
        "max_ms": max(lags) if lags else float("nan"),
        "rate": rate,
        "n": n,
        "producer_behind": behind,
    }


def enqueue(c: Contender, n_one: int = 5000, n_many: int = 100_000) -> dict[str, Any]:
    """Enqueue rate of runs due an hour ahead: one call each, and batched."""
    with server() as srv:
        c.open(srv.url, _queue())
        meter = meter_for(srv)
        if hasattr(c, "measure_enqueue"):  # a contender in another language measures itself
            try:
                return c.measure_enqueue(n_one, n_many, meter)  # type: ignore[no-any-return]
            finally:
                meter.r.close()
        try:
            due = now_ms() + HOUR_MS
            c.enqueue_one(due, payload(due))  # connect and load scripts before timing
            meter.start()
            t = time.perf_counter()
            ones = [(due + i, payload(due + i, i)) for i in range(n_one)]
            if hasattr(c, "enqueue_ones"):  # an asyncio client awaits them on a running loop
                c.enqueue_ones(ones)
            else:
                for item_due, item in ones:
                    c.enqueue_one(item_due, item)
            one = n_one / (time.perf_counter() - t)
            costs = meter.stop().per_run(n_one, "one")
            many = float("nan")
            if c.has_batch:
                items = [(due + i, payload(due + i, i)) for i in range(n_many)]
                meter.start()
                t = time.perf_counter()
                c.enqueue_many(items)
                many = n_many / (time.perf_counter() - t)
                costs.update(meter.stop().per_run(n_many, "many"))
        finally:
            meter.r.close()
            c.close()
    return {"one_per_s": one, "many_per_s": many, "n_one": n_one, "n_many": n_many, **costs}


class _Monitor:
    """MONITOR in a thread: counts what clients send apart from what scripts run inside."""

    def __init__(self, url: str) -> None:
        self.r = client(url)
        self.seen: list[tuple[float, bool]] = []
        self.stop = False
        self.mon = self.r.monitor()
        self.mon.__enter__()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        try:
            while not self.stop:
                cmd = self.mon.next_command()
                self.seen.append((float(cmd["time"]), cmd.get("client_type") == "lua"))
        except Exception:  # noqa: BLE001 - the server went away at the end: stop counting
            pass

    def close(self) -> None:
        self.stop = True
        try:
            self.mon.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - closing a monitor connection mid-read may raise
            pass
        self.r.close()

    def counts(self, t0: float, t1: float) -> tuple[int, int]:
        """(requests from clients, commands run inside scripts) between t0 and t1."""
        inside = [lua for t, lua in self.seen if t0 <= t <= t1]
        return inside.count(False), inside.count(True)


def idle(
    c: Contender,
    n: int = 10_000,
    window_s: float = 20.0,
    warmup_s: float = 3.0,
) -> dict[str, Any]:
    """Redis commands/s and consumer CPU while `n` runs wait an hour ahead."""
    with server() as srv:
        q = _queue()
        c.open(srv.url, q)
        r = client(srv.url)
        try:
            due = now_ms() + HOUR_MS
            _enqueue_all(c, [(due + i, payload(due + i, i)) for i in range(n)])
            procs = [p.start() for p in c.consumers(srv.url, q, 1, None)]
            try:
                wait_ready(procs, READY_TIMEOUT)
                time.sleep(warmup_s)
                pids = [pid for p in procs for pid in tree_pids(p.pid)]
                mon = _Monitor(srv.url)
                cpu0 = sum(cpu_seconds(p) for p in pids)
                cmd0, t, w0 = commands_processed(r), time.monotonic(), time.time()
                time.sleep(window_s)
                cmd1, el, w1 = commands_processed(r), time.monotonic() - t, time.time()
                cpu1 = sum(cpu_seconds(p) for p in pids)
                requests, _ = mon.counts(w0, w1)
                mon.close()
            finally:
                _stop(procs)
        finally:
            r.close()
            c.close()
    # commands_per_s counts every command Redis ran, those inside scripts too (one INFO of
    # ours is in the difference); requests_per_s counts what the clients sent (round trips).
    return {
        "requests_per_s": max(0, requests - 1) / el,
        "commands_per_s": (cmd1 - cmd0 - 1) / el,
        "cpu_percent": 100 * (cpu1 - cpu0) / el,
        "n": n,
        "window_s": el,
    }


def memory(c: Contender, n: int = 10_000) -> dict[str, Any]:
    """Redis memory per delayed run (~110-byte payload), over a warmed-up baseline."""
    with server() as srv:
        c.open(srv.url, _queue())
        r = client(srv.url)
        try:
            due = now_ms() + HOUR_MS
            _enqueue_all(c, [(due + i, payload(due + i, i)) for i in range(200)])
            base = used_memory(r)
            _enqueue_all(c, [(due + 200 + i, payload(due + i, i)) for i in range(n)])
            after = used_memory(r)
        finally:
            r.close()
            c.close()
    return {"bytes_per_run": (after - base) / n, "n": n}
