"""An app for the reliability tests' processes: one quick task and one declared rule.

The task appends "run_id|pid" to the Redis list `rel:<queue>:executed`.
"""

from __future__ import annotations

import os

import redis

import zsched

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"), queue="rel")
# Declared rules are written by the dispatcher at start: with Redis down, that must wait too.
app.declare("rel-hourly", "quick", every=3600)
_r: redis.Redis | None = None


@app.task(name="quick")
def quick(payload: object) -> None:
    global _r
    if _r is None:
        _r = redis.Redis.from_url(os.environ["ZSCHED_REDIS_URL"])
    run = zsched.current_run()
    _r.rpush(f"rel:{run.queue}:executed", f"{run.run_id}|{os.getpid()}")
