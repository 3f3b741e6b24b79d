"""Enqueue rates of zsched.AsyncApp next to App's: `python -m bench.aio_enqueue [rounds]`.

Runs an hour ahead, into a fresh queue per measurement, on one private redis-server; the
variants are interleaved round by round and the medians printed (runs/s):

- one call each: `await aio.enqueue()` one after another (App: `app.enqueue()`);
- one call each, 16 coroutines at once (asyncio.gather): what a web app's requests do;
- batched: `enqueue_many` of 10,000 runs, 5 times.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from typing import Any

import zsched

from .common import now_ms, payload, server

HOUR_MS = 3_600_000
N_ONE = 3000
N_MANY = 50_000


def _q() -> str:
    return "aio-bench-" + uuid.uuid4().hex[:8]


def sync_one(url: str) -> float:
    app = zsched.App(url, _q())
    due = now_ms() + HOUR_MS
    app.enqueue("t", payload(due), run_at=due / 1000)  # connect, load the scripts
    t = time.perf_counter()
    for i in range(N_ONE):
        app.enqueue("t", payload(due + i, i), run_at=(due + i) / 1000)
    rate = N_ONE / (time.perf_counter() - t)
    app.close()
    return rate


def sync_many(url: str) -> float:
    app = zsched.App(url, _q())
    due = now_ms() + HOUR_MS
    items = [{"task": "t", "payload": payload(due + i, i), "run_at": (due + i) / 1000}
             for i in range(N_MANY)]  # fmt: skip
    app.enqueue("t")
    t = time.perf_counter()
    for j in range(0, N_MANY, 10_000):
        app.enqueue_many(items[j : j + 10_000])
    rate = N_MANY / (time.perf_counter() - t)
    app.close()
    return rate


async def _async_one(url: str, concurrency: int) -> float:
    aio = zsched.AsyncApp(url, _q())
    due = now_ms() + HOUR_MS
    await aio.enqueue("t", payload(due), run_at=due / 1000)

    async def part(k: int) -> None:
        for i in range(k, N_ONE, concurrency):
            await aio.enqueue("t", payload(due + i, i), run_at=(due + i) / 1000)

    t = time.perf_counter()
    await asyncio.gather(*(part(k) for k in range(concurrency)))
    rate = N_ONE / (time.perf_counter() - t)
    await aio.aclose()
    return rate


async def _async_many(url: str) -> float:
    aio = zsched.AsyncApp(url, _q())
    due = now_ms() + HOUR_MS
    items = [{"task": "t", "payload": payload(due + i, i), "run_at": (due + i) / 1000}
             for i in range(N_MANY)]  # fmt: skip
    await aio.enqueue("t")
    t = time.perf_counter()
    for j in range(0, N_MANY, 10_000):
        await aio.enqueue_many(items[j : j + 10_000])
    rate = N_MANY / (time.perf_counter() - t)
    await aio.aclose()
    return rate


VARIANTS: dict[str, Any] = {
    "App one call each": sync_one,
    "AsyncApp one call each": lambda url: asyncio.run(_async_one(url, 1)),
    "AsyncApp one call each, 16 coroutines": lambda url: asyncio.run(_async_one(url, 16)),
    "App batched (enqueue_many 10,000)": sync_many,
    "AsyncApp batched (enqueue_many 10,000)": lambda url: asyncio.run(_async_many(url)),
}


def main(rounds: int = 3) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with server() as srv:
        for _ in range(rounds):
            for name, fn in VARIANTS.items():
                results[name].append(fn(srv.url))
    for name, rates in results.items():
        runs = " / ".join(f"{r:,.0f}" for r in rates)
        print(f"{name:42s} median {statistics.median(rates):>9,.0f} runs/s  ({runs})")
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
