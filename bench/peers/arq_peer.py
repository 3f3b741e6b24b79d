"""arq: `enqueue_job(_defer_until=...)`, one worker with arq's defaults (max_jobs 10,
poll_delay 0.5 s)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..common import Proc
from ..contender import Item, py_module
from .base import cleanup, consumer
from .hits import hit


async def noop(ctx: Any, payload: Any) -> None:
    hit(payload)


class Arq:
    name = "arq"
    has_batch = False
    config = "1 arq worker, defaults (max_jobs 10, poll_delay 0.5 s), _defer_until"

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: Any = None
        self.procs: list[Proc] = []

    def open(self, url: str, queue: str) -> None:
        from arq import create_pool
        from arq.connections import RedisSettings

        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(
            create_pool(RedisSettings.from_dsn(url), default_queue_name=queue)
        )

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        assert self.loop
        self.loop.run_until_complete(
            self.pool.enqueue_job(
                "noop", payload, _defer_until=datetime.fromtimestamp(due_ms / 1000, UTC)
            )
        )

    def enqueue_many(self, items: list[Item]) -> None:
        raise NotImplementedError

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        procs = [
            consumer(py_module("bench.peers.arq_peer", url, queue), "arq") for _ in range(workers)
        ]
        self.procs += procs
        return procs

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.pool.aclose())
            self.loop.close()
            self.loop = None
        cleanup(self.procs)
        self.procs = []


def main() -> None:
    import logging

    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    logging.basicConfig(level=logging.WARNING)
    asyncio.set_event_loop(asyncio.new_event_loop())
    w = Worker(
        functions=[func(noop, name="noop")],
        queue_name=sys.argv[2],
        redis_settings=RedisSettings.from_dsn(sys.argv[1]),
    )
    print("ready", flush=True)
    w.run()


if __name__ == "__main__":
    main()
