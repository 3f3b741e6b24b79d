"""A test app for limit tests with several worker processes: handlers count how many run at
once, and when each starts, in a separate Redis (ZSCHED_TRACKER_URL)."""

from __future__ import annotations

import os
import time

import redis

import zsched

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"), queue="limits")
_t = redis.Redis.from_url(os.environ.get("ZSCHED_TRACKER_URL", "redis://127.0.0.1:6379/1"))
# Count up, remember the highest count seen, atomically in the tracker.
_enter = _t.register_script(
    "local n = redis.call('INCR', KEYS[1]) "
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end "
    "return n"
)


def _track(kind: str, seconds: float) -> None:
    run = zsched.current_run()
    q = run.queue
    _enter(keys=[f"{q}:{kind}:now", f"{q}:{kind}:max"])
    t = _t.time()
    _t.rpush(f"{q}:{kind}:starts", f"{int(t[0]) * 1_000_000 + int(t[1])}")
    try:
        if _t.incr(f"{q}:{kind}:hang") == 1 and kind == "hang":
            time.sleep(3600)  # the first one hangs until its process is killed
        time.sleep(seconds)
    finally:
        _t.decr(f"{q}:{kind}:now")
        _t.rpush(f"{q}:{kind}:done", run.run_id)


@app.task(name="capped", max_concurrency=2)
def capped(payload: object) -> None:
    _track("capped", 0.05)


@app.task(name="rated", rate="20/s", burst=2)
def rated(payload: object) -> None:
    _track("rated", 0.0)


@app.task(name="hang", max_concurrency=1)
def hang(payload: object) -> None:
    _track("hang", 0.0)
