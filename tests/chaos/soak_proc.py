"""A soak worker: `python -m soak_proc URL QUEUE DEDUPE_WINDOW_MS STATS_FILE`.

Like `zsched worker`, with the queue's dedupe window set (completion records expire after it)
and a handler that only measures its start lag. Every second it appends one JSON line to
STATS_FILE: {"t": unix time, "n": runs started in the second, "lags": a sample of lags (ms)}.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import signal
import sys
import time
from typing import Any

import zsched

SAMPLE = 200  # lags kept per second: enough for p99 over a window of several seconds


class Stats:
    def __init__(self, path: str) -> None:
        self.path = path
        self.n = 0
        self.lags: list[int] = []

    def add(self, lag_ms: int) -> None:
        self.n += 1
        if len(self.lags) < SAMPLE:
            self.lags.append(lag_ms)
        elif random.random() < SAMPLE / self.n:  # reservoir sample of the second
            self.lags[random.randrange(SAMPLE)] = lag_ms

    async def flush_every_second(self, stop: asyncio.Event) -> None:
        with open(self.path, "a", buffering=1) as f:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except TimeoutError:
                    pass
                f.write(json.dumps({"t": time.time(), "n": self.n, "lags": self.lags}) + "\n")
                self.n, self.lags = 0, []


async def main(url: str, queue: str, window_ms: int, stats_path: str) -> None:
    app = zsched.App(url, queue=queue, settings=zsched.QueueSettings(dedupe_window_ms=window_ms))
    stats = Stats(stats_path)

    @app.task(name="soak")
    async def soak(payload: Any) -> None:
        run = zsched.current_run()
        stats.add(int(time.time() * 1000 - run.scheduled_for.timestamp() * 1000))

    w = app.worker(concurrency=64, read_batch=200)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    flusher = asyncio.create_task(stats.flush_every_second(stop))
    try:
        await w.run(stop)
    finally:
        await w.close()
        await flusher


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
