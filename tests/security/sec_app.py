"""The app of the security tests' processes. Handlers record to a sink server given by
SEC_SINK_URL: their side effects are not zsched's, so they need no zsched permission."""

from __future__ import annotations

import os

import redis

import zsched

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"), queue="sec")
# A rule with an overlap lease: fire.lua, the lease renewal and unlease.lua all run.
app.declare("sec-every-second", "quick", every=1, overlap="skip")
_sink: redis.Redis | None = None


@app.task(name="quick")
def quick(payload: object) -> None:
    global _sink
    if _sink is None:
        _sink = redis.Redis.from_url(os.environ["SEC_SINK_URL"])
    run = zsched.current_run()
    _sink.rpush(f"sec:{run.queue}:executed", run.run_id)
