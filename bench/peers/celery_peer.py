"""Celery with the Redis broker: `apply_async(eta=...)`, one worker process (solo pool).

ETA tasks are fetched at once and held in the worker's memory until due (Celery's design),
so fire lag is a timer in the worker; the broker holds them only while no worker runs."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from celery import Celery

from .. import handler
from ..common import Proc
from .base import HitsPeer
from .hits import hit

app = Celery("bench", broker=os.environ.get("BENCH_CELERY_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    worker_redirect_stdouts=False,
)


@app.task(name="noop")
def noop(payload: Any) -> None:
    hit(payload)
    handler.block()


class CeleryPeer(HitsPeer):
    name = "celery"
    module = "bench.peers.celery_peer"
    config = (
        "1 worker process (--pool solo), Redis broker, worker_prefetch_multiplier 4 (default: "
        "4 x the pool's concurrency reserved; ETA runs are held beyond it), apply_async(eta=...)"
    )

    def __init__(self, concurrency: int | None = None) -> None:
        super().__init__(concurrency)
        if concurrency:
            self.config = (
                f"1 worker process (--pool threads --concurrency {concurrency}), Redis broker, "
                f"worker_prefetch_multiplier 4 (default: {4 * concurrency} reserved; ETA runs "
                "are held beyond it), apply_async(eta=...)"
            )
        self.queue = ""
        self.app: Celery | None = None

    def open(self, url: str, queue: str) -> None:
        # A client app of its own per run: each run has its own redis-server.
        self.app = Celery("bench-client", broker=url)
        self.app.conf.update(broker_connection_retry_on_startup=True, task_ignore_result=True)
        self.queue = queue

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        assert self.app is not None
        self.app.send_task(
            "noop",
            args=[payload],
            queue=self.queue,
            eta=datetime.fromtimestamp(due_ms / 1000, UTC),
        )

    def consumer_args(self, url: str, queue: str) -> list[str]:
        # The broker URL goes in the environment (consumers()).
        return [queue, str(self.concurrency or 0)]

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        procs = super().consumers(url, queue, workers, lags)
        for p in procs:
            assert p.env is not None
            p.env["BENCH_CELERY_URL"] = url
        return procs

    def close(self) -> None:
        if self.app is not None:
            self.app.close()
            self.app = None
        self.release()


def main() -> None:
    from celery.signals import worker_ready

    @worker_ready.connect
    def ready(**_: Any) -> None:
        os.write(1, b"ready\n")  # fd 1 itself: Celery may have replaced sys.stdout

    app.worker_main(
        [
            "worker",
            "-Q",
            sys.argv[1],
            *(
                ["--pool", "threads", "--concurrency", sys.argv[2]]
                if int(sys.argv[2])
                else ["--pool", "solo"]
            ),  # fmt: skip
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )


if __name__ == "__main__":
    main()
