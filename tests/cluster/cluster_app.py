"""The App the cluster/Sentinel tests run in worker processes. Each execution is recorded in a
separate "sink" redis-server (ZSCHED_TEST_SINK), so the record survives a failover of the
deployment under test."""

from __future__ import annotations

import os

import redis

import zsched

app = zsched.App(
    os.environ["ZSCHED_REDIS_URL"],
    queue=os.environ.get("ZSCHED_QUEUE", "cq"),
    partitions=int(os.environ.get("ZSCHED_TEST_PARTITIONS", "1")),
)
_sink = redis.Redis.from_url(os.environ["ZSCHED_TEST_SINK"])


@app.task(name="record")
def record(payload: object) -> None:
    run = zsched.current_run()
    _sink.rpush(f"exec:{run.queue}", f"{run.run_id}|{run.attempt}|{os.getpid()}")
