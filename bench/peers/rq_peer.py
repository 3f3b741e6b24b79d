"""RQ: `enqueue_at` into the scheduled registry; one `Worker` with its scheduler (the default
worker forks a work horse per job)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..common import Proc
from ..contender import Item, py_module
from .base import cleanup, consumer
from .hits import hit


def noop(payload: Any) -> None:
    hit(payload)


class RQ:
    name = "rq"
    has_batch = False
    config = "1 rq Worker (forks a work horse per job) with_scheduler=True, enqueue_at"

    def __init__(self) -> None:
        self.q: Any = None
        self.procs: list[Proc] = []

    def open(self, url: str, queue: str) -> None:
        from redis import Redis
        from rq import Queue

        self.q = Queue(queue, connection=Redis.from_url(url))

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        self.q.enqueue_at(
            datetime.fromtimestamp(due_ms / 1000, UTC), "bench.peers.rq_peer.noop", payload
        )

    def enqueue_many(self, items: list[Item]) -> None:
        raise NotImplementedError

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        procs = [
            consumer(py_module("bench.peers.rq_peer", url, queue), "rq") for _ in range(workers)
        ]
        self.procs += procs
        return procs

    def close(self) -> None:
        if self.q is not None:
            self.q.connection.close()
            self.q = None
        cleanup(self.procs)
        self.procs = []


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
