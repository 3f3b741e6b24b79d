"""RQ: `enqueue_at` into the scheduled registry; one `Worker` with its scheduler (the default
worker forks a work horse per job)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from .. import handler
from .base import HitsPeer
from .hits import hit


def noop(payload: Any) -> None:
    hit(payload)
    handler.block()


class RQ(HitsPeer):
    name = "rq"
    module = "bench.peers.rq_peer"
    config = (
        "1 rq Worker (forks a work horse per job, 1 job at a time, no prefetch) "
        "with_scheduler=True, enqueue_at"
    )

    def __init__(self, concurrency: int | None = None) -> None:
        super().__init__(concurrency)
        if concurrency:
            # RQ has no in-process concurrency: one job at a time per worker process.
            self.config = (
                "1 rq Worker (no concurrency setting: 1 job at a time, no prefetch), enqueue_at"
            )
        self.q: Any = None

    def open(self, url: str, queue: str) -> None:
        from redis import Redis
        from rq import Queue

        self.q = Queue(queue, connection=Redis.from_url(url))

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        self.q.enqueue_at(
            datetime.fromtimestamp(due_ms / 1000, UTC), "bench.peers.rq_peer.noop", payload
        )

    def close(self) -> None:
        if self.q is not None:
            self.q.connection.close()
            self.q = None
        self.release()


def main() -> None:
    import logging

    from redis import Redis
    from rq import Queue, Worker

    url, queue = sys.argv[1], sys.argv[2]
    logging.basicConfig(level=logging.WARNING)
    conn = Redis.from_url(url)
    w = Worker([Queue(queue, connection=conn)], connection=conn)
    print("ready", flush=True)
    w.work(with_scheduler=True, logging_level="WARNING")


if __name__ == "__main__":
    main()
