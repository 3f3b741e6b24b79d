"""What per-task limits cost: `python -m bench.limits [N] [ROUNDS]`.

Runs N no-op runs of one task through one in-process worker (tick passes of 100, dispatch
first), for a task without limits, with max_concurrency (never reached) and with a rate
(never reached), interleaved over ROUNDS; prints worker throughput and Redis's own time per run
(INFO commandstats), so the cost of acquire.lua and the release ZREM shows apart from the
machine's noise.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

import zsched
from zsched.observability.metrics import Metrics

from .common import client, median, server

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "max_concurrency": {"max_concurrency": 10_000},
    "rate": {"rate": 1_000_000.0, "burst": 1_000_000},
}


def _redis_us(r: Any) -> int:
    return sum(int(v["usec"]) for v in r.info("commandstats").values())


async def one(url: str, variant: str, n: int) -> tuple[float, float]:
    app = zsched.App(url, queue=f"bench-{uuid.uuid4().hex[:8]}", metrics=Metrics())

    @app.task(name="noop", **VARIANTS[variant])
    async def noop(payload: Any) -> None:
        return None

    app.enqueue_many([("noop", i) for i in range(n)])
    d = app.dispatcher()
    while (await d.tick()).more:
        pass
    await d.tick()
    await d.close()
    w = app.worker(concurrency=100, read_batch=100)
    r = client(url)
    before, t0 = _redis_us(r), time.perf_counter()
    done = 0
    while done < n:
        done += await w.tick(100)
    took = time.perf_counter() - t0
    redis_us = (_redis_us(r) - before) / n
    await w.close()
    app.close()
    return n / took, redis_us


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 5000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    with server() as srv:
        res: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for v in VARIANTS:
                res[v].append(asyncio.run(one(srv.url, v, n)))
    for v, rows in res.items():
        rates = [r[0] for r in rows]
        us = [r[1] for r in rows]
        print(f"{v:<16} worker {median(rates):>8.0f} runs/s ({'/'.join(f'{x:.0f}' for x in rates)})"
              f"   Redis {median(us):5.2f} us/run ({'/'.join(f'{x:.2f}' for x in us)})")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
