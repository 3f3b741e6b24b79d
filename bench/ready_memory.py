"""Redis memory of dispatched runs not read yet: `python -m bench.ready_memory [N]`.

used_memory after enqueueing N due runs (the benchmark payload, ~110 bytes), then after
dispatching them all; each per run, with the shares of the `runs` hash and of the stream
(MEMORY USAGE ... SAMPLES 0). A burst due at once sits on the stream like this until workers
read it. BENCHMARKS.md, "Session 22".
"""

from __future__ import annotations

import sys

import redis

from zsched import App
from zsched.store import scripts as S

from .common import now_ms, payload, server


def measure(port: int, n: int) -> dict[str, float]:
    r = redis.Redis(port=port, protocol=2)
    app = App(f"redis://127.0.0.1:{port}/0", queue="m")
    base = r.info("memory")["used_memory"]
    due = now_ms() - 1000
    for s in range(0, n, 1000):
        batch = range(s, min(n, s + 1000))
        app.enqueue_many([{"task": "noop", "payload": payload(due, i)} for i in batch])
    delayed = r.info("memory")["used_memory"]
    moved = 0
    while moved < n:
        call = S.dispatch(app.keys, now_ms=None, limit=1000, max_backlog=0)
        moved += app.scripts.run(call).moved
    ready = r.info("memory")["used_memory"]
    return {
        "delayed_b_per_run": (delayed - base) / n,
        "ready_b_per_run": (ready - base) / n,
        "runs_hash_b_per_run": (r.memory_usage(app.keys.runs, samples=0) or 0) / n,
        "stream_b_per_run": (r.memory_usage(app.keys.ready, samples=0) or 0) / n,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    with server() as srv:
        out = measure(srv.port, n)
    print(f"{n:,} runs: " + ", ".join(f"{k} {v:.0f}" for k, v in out.items()))


if __name__ == "__main__":
    main()
