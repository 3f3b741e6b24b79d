"""saq: `enqueue(scheduled=...)`, one worker with saq's defaults (concurrency 10)."""

from __future__ import annotations

import asyncio
import math
import signal
import sys
from typing import Any

from .. import handler
from .base import HitsPeer
from .hits import hit


async def noop(ctx: Any, *, payload: Any) -> None:
    hit(payload)
    await handler.wait()


class Saq(HitsPeer):
    name = "saq"
    module = "bench.peers.saq_peer"
    config = (
        "1 saq Worker, defaults (concurrency 10, no prefetch: each slot BLMOVEs one job), "
        "enqueue(scheduled=epoch s)"
    )

    def __init__(self, concurrency: int | None = None) -> None:
        super().__init__(concurrency)
        if concurrency:
            self.config = (
                f"1 saq Worker, concurrency {concurrency} (no prefetch: each slot BLMOVEs one "
                "job), enqueue(scheduled=epoch s)"
            )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.q: Any = None

    def open(self, url: str, queue: str) -> None:
        from saq import Queue

        self.loop = asyncio.new_event_loop()
        self.q = Queue.from_url(url, name=queue)
        self.loop.run_until_complete(self.q.connect())

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        assert self.loop
        # saq schedules in whole epoch seconds: round up, never run before the intended time.
        self.loop.run_until_complete(
            self.q.enqueue("noop", scheduled=math.ceil(due_ms / 1000), payload=payload)
        )

    def consumer_args(self, url: str, queue: str) -> list[str]:
        return [url, queue, str(self.concurrency or 10)]

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.q.disconnect())
            self.loop.close()
            self.loop = None
        self.release()


async def _main(url: str, queue: str, concurrency: int) -> None:
    from saq import Queue, Worker

    w = Worker(Queue.from_url(url, name=queue), functions=[("noop", noop)], concurrency=concurrency)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    task = asyncio.create_task(w.start())
    print("ready", flush=True)
    await stop.wait()
    await w.stop()
    task.cancel()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
