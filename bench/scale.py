"""zsched-only scenarios: a million runs due at the same instant, and memory after a drain.

scale(): enqueue `n` runs that all come due at the same instant (enqueue cost at 10k vs at n),
then one dispatcher moves them onto the stream (runs/s), then worker processes drain them;
a separate process PINGs Redis throughout, and the slow log (5 ms threshold) records any
script that held Redis too long.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from zsched.store import scripts as S

from .common import (
    ROOT,
    BenchError,
    Proc,
    client,
    median,
    now_ms,
    payload,
    percentile,
    server,
    used_memory,
    wait_ready,
)
from .contender import ZSCHED_WORKER, py_module

SLOW_US = 5000


def _pings(path: Path, t0: float, t1: float) -> dict[str, float]:
    try:
        samples = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    rtts = [rtt for t, rtt in samples if t0 <= t <= t1]
    return {
        "ping_p50_ms": percentile(rtts, 50),
        "ping_p99_ms": percentile(rtts, 99),
        "ping_max_ms": max(rtts, default=float("nan")),
        "pings": len(rtts),
    }


def _slowlog(r: Any) -> dict[str, Any]:
    entries = r.slowlog_get(10_000)
    ours = [e for e in entries if e["command"].split(b" ")[0].upper() in (b"EVALSHA", b"EVAL")]
    names = {hashlib.sha1(S.source(n).encode()).hexdigest().encode(): n for n in S.NAMES}
    by_script: dict[str, int] = {}
    for e in ours:
        name = names.get(e["command"].split(b" ")[1], "?")
        by_script[name] = by_script.get(name, 0) + 1
    others = sorted({e["command"].split(b" ")[0].decode() for e in entries if e not in ours})
    if by_script or others:
        print(f"    slow log: scripts {by_script}, other commands {others}")
        # Which calls: a dispatch call's limit is the word after now_ms (`EVALSHA sha 6 k1..k6 now limit
        # max_backlog`), so a call sized too big reads apart from a pause of the host.
        t0 = min(e["start_time"] for e in entries)
        for e in sorted(ours, key=lambda e: e["start_time"]):
            words = e["command"].split(b" ")
            name = names.get(words[1], "?")
            limit = _dispatch_limit(words) if name == "dispatch" else "-"
            print(
                f"      {name} {e['duration'] / 1000:.2f} ms at +{e['start_time'] - t0} s, limit {limit}"
            )
    return {
        "slow_scripts": len(ours),
        "slow_other": len(entries) - len(ours),
        "slowest_script_ms": max((e["duration"] for e in ours), default=0) / 1000,
    }


def _dispatch_limit(words: list[bytes]) -> str:
    """A dispatch call's limit: `EVALSHA sha numkeys keys... now_ms limit ...`."""
    at = 4 + int(words[2])
    return words[at].decode() if len(words) > at else "-"


def _wait_stat(r: Any, key: str, field: str, n: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while int(r.hget(key, field) or 0) < n:
        if time.monotonic() > deadline:
            raise BenchError(f"{field} did not reach {n} within {timeout}s")
        time.sleep(0.01)
    return time.time()


async def _dispatch_all(app: Any, n: int, timeout: float) -> None:
    d = app.dispatcher(batch_size=500, max_batches_per_tick=1000, max_backlog=0)
    deadline = time.monotonic() + timeout
    moved = 0
    try:
        while moved < n and time.monotonic() < deadline:
            moved += (await d.tick()).moved
    finally:
        await d.close()


def scale(
    n: int = 1_000_000, chunk: int = 10_000, workers: int = 1, timeout: float = 300.0
) -> dict[str, Any]:
    import zsched
    from zsched.observability.metrics import Metrics

    out: dict[str, Any] = {"n": n, "workers": workers}
    with (
        server("--slowlog-log-slower-than", str(SLOW_US), "--slowlog-max-len", "10000") as srv,
        tempfile.TemporaryDirectory(prefix="zsched-bench-") as tmp,
    ):
        q = "s" + uuid.uuid4().hex[:8]
        app = zsched.App(srv.url, queue=q, metrics=Metrics())
        r = client(srv.url)
        try:
            due = now_ms() - 1000
            rates = []
            for start in range(0, n, chunk):
                items = [
                    {"task": "noop", "payload": payload(due, start + i), "run_at": due / 1000}
                    for i in range(min(chunk, n - start))
                ]
                t = time.perf_counter()
                app.enqueue_many(items)
                rates.append(len(items) / (time.perf_counter() - t))
            # Medians of the first and last five chunks: at 10k and at ~n runs delayed.
            first, last = median(rates[:5]), median(rates[-5:])
            out["enqueue_first_chunks_per_s"] = first
            out["enqueue_last_chunks_per_s"] = last
            out["enqueue_flatness"] = last / first
            out["memory_per_run_b"] = used_memory(r) / n

            pings = Path(tmp) / "pings.json"
            pinger = Proc(py_module("bench.pinger", srv.url, str(pings)), cwd=str(ROOT)).start()
            wait_ready([pinger], 30)
            time.sleep(0.2)
            t_d0 = time.time()
            asyncio.run(_dispatch_all(app, n, timeout))
            t_d1 = time.time()
            dispatched = int(r.hget(app.keys.stats, "dispatched") or 0)
            if dispatched < n:
                raise BenchError(f"dispatched {dispatched} of {n} within {timeout}s")
            out["dispatch_per_s"] = n / (t_d1 - t_d0)

            procs = [
                Proc(
                    py_module(
                        "bench.zsched_proc",
                        "worker",
                        "--url",
                        srv.url,
                        "--queue",
                        q,
                        "--settings",
                        json.dumps(ZSCHED_WORKER),
                    ),
                    cwd=str(ROOT),
                ).start()
                for _ in range(workers)
            ]
            try:
                wait_ready(procs, 30)
                t_w0 = time.time()
                t_w1 = _wait_stat(r, app.keys.stats, "acked", n, timeout)
            finally:
                for p in procs:
                    p.stop()
                pinger.stop()
            out["drain_per_s"] = n / (t_w1 - t_w0)
            # With one worker, any reclaim is of its own entries (reads outpacing its writes
            # past the visibility timeout; ReadLoop.free_slots): they would run twice.
            st = {k.decode(): int(v) for k, v in r.hgetall(app.keys.stats).items()}
            out.update({f"drain_{k}": st.get(k, 0) for k in ("reclaimed", "fenced", "duplicate")})
            out["drain_acked"] = st.get("acked", 0)
            out.update({f"dispatch_{k}": v for k, v in _pings(pings, t_d0, t_d1).items()})
            out.update({f"drain_{k}": v for k, v in _pings(pings, t_w0, t_w1).items()})
            out.update(_slowlog(r))
        finally:
            r.close()
            app.close()
    return out


def memory_drain(
    n: int = 10_000,
    dedupe_ms: int = 1000,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Memory after a drain: enqueue, run everything, let the dedupe window pass; twice."""
    import zsched
    from zsched.observability.metrics import Metrics

    from .contender import Zsched

    with server() as srv:
        q = "m" + uuid.uuid4().hex[:8]
        r = client(srv.url)
        app = zsched.App(
            srv.url,
            queue=q,
            metrics=Metrics(),
            settings=zsched.QueueSettings(dedupe_window_ms=dedupe_ms),
        )
        c = Zsched(dedupe_ms=dedupe_ms)
        try:
            procs = [p.start() for p in c.consumers(srv.url, q, 1, None)]
            try:
                wait_ready(procs, 30)
                # The first round warms Redis up (allocator, stream and group structures grow
                # once, ~0.5 MB, and stay); the baseline is what is left after it.
                rounds = []
                for k in range(2):
                    due = now_ms()
                    app.enqueue_many({"task": "noop", "payload": payload(due, i)} for i in range(n))
                    _wait_stat(r, app.keys.stats, "acked", n * (k + 1), timeout)
                    peak = used_memory(r)
                    time.sleep(dedupe_ms / 1000 + 0.5)
                    rounds.append((peak, used_memory(r)))
                base, (peak, after) = rounds[0][1], rounds[1]
            finally:
                for p in procs:
                    p.stop()
        finally:
            r.close()
            app.close()
    return {
        "baseline_b": base,
        "after_drain_b": peak,
        "after_window_b": after,
        "residual_per_run_b": (after - base) / n,
        "n": n,
    }


if __name__ == "__main__":
    print(scale(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
