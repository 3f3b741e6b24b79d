"""A test app for worker processes: handlers report progress through Redis lists."""

from __future__ import annotations

import asyncio
import os
import time

import redis

import zsched

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"), queue="crash")
_r = redis.Redis.from_url(app.url or "redis://127.0.0.1:6379/0")


def _log(kind: str) -> None:
    run = zsched.current_run()
    _r.rpush(
        f"test:{run.queue}:{kind}", f"{run.run_id}|{run.attempt}|{run.deliveries}|{os.getpid()}"
    )


@app.task(name="quick")
def quick(payload: object) -> None:
    _log("executed")


@app.task(name="slow")
def slow(payload: dict) -> None:
    _log("started")
    time.sleep(float(payload.get("seconds", 0.2)))
    _log("executed")


@app.task(name="hang")
def hang(payload: object) -> None:
    _log("started")
    if _r.incr(f"test:{zsched.current_run().queue}:hang-count") == 1:
        time.sleep(3600)  # the first execution hangs until the process is killed
    _log("executed")


@app.task(name="awaits")
async def awaits(payload: dict) -> None:
    """An async handler that waits (its run goes on in a task of its own: Runner.start)."""
    await asyncio.sleep(float(payload.get("seconds", 0.01)))
    _log("executed")
