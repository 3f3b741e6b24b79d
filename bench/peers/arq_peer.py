"""arq: `enqueue_job(_defer_until=...)`, one worker with arq's defaults (max_jobs 10,
poll_delay 0.5 s)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from .. import handler
from .base import HitsPeer
from .hits import hit


async def noop(ctx: Any, payload: Any) -> None:
    hit(payload)
    await handler.wait()


class Arq(HitsPeer):
    name = "arq"
    module = "bench.peers.arq_peer"
    config = (
        "1 arq worker, defaults (max_jobs 10, queue_read_limit 100 = max(5 x max_jobs, 100), "
        "poll_delay 0.5 s), _defer_until"
    )

    def __init__(self, concurrency: int | None = None) -> None:
        super().__init__(concurrency)
        if concurrency:
            self.config = (
                f"1 arq worker, max_jobs {concurrency} (queue_read_limit "
                f"{max(5 * concurrency, 100)} = max(5 x max_jobs, 100), poll_delay 0.5 s), "
                "_defer_until"
            )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: Any = None

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

    def consumer_args(self, url: str, queue: str) -> list[str]:
        return [url, queue, str(self.concurrency or 10)]

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.pool.aclose())
            self.loop.close()
            self.loop = None
        self.release()


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
        max_jobs=int(sys.argv[3]),
    )
    print("ready", flush=True)
    w.run()


if __name__ == "__main__":
    main()
