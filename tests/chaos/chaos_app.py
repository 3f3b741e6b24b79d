"""The app the chaos suite's worker and dispatcher processes load.

Its one task writes the run's effect to an idempotent sink (HSETNX keyed by run id) and a raw
line per execution, in one MULTI/EXEC on a separate redis-server that no fault touches: an
execution is observed exactly when its effect transaction committed, so a worker killed
mid-handler either left both records or neither.

Environment: CHAOS_REDIS_URL (the faulted server), CHAOS_SINK_URL, CHAOS_QUEUE.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import redis.asyncio as aioredis

import zsched

QUEUE = os.environ.get("CHAOS_QUEUE", "chaos")
app = zsched.App(os.environ.get("CHAOS_REDIS_URL", "redis://127.0.0.1:6379/0"), queue=QUEUE)
#: Sink keys (on the sink server, not zsched's): effects HASH run_id -> first writer;
#: log LIST of "run_id|attempt|deliveries|pid|start_ms|scheduled_ms|schedule_id".
EFFECTS, LOG = "chaos:effects", "chaos:log"
_sink: dict[int, Any] = {}


def sink() -> Any:
    # One client per event loop (a worker process has one loop; keyed for safety).
    loop_id = id(asyncio.get_running_loop())
    if loop_id not in _sink:
        # A long socket timeout: the sink is not under test, and a worker SIGSTOPped (a
        # zombie) past redis-py's default 5 s would find its pending write timed out on waking
        # and fail the handler (a retry the checks do not expect).
        _sink[loop_id] = aioredis.Redis.from_url(os.environ["CHAOS_SINK_URL"], protocol=2,
                                                 socket_timeout=60)  # fmt: skip
    return _sink[loop_id]


async def record(work_s: float) -> None:
    run = zsched.current_run()
    start_ms = time.time_ns() // 1_000_000
    # A little work widens the window in which a kill lands between effect and ack.
    await asyncio.sleep(work_s)
    scheduled_ms = int(run.scheduled_for.timestamp() * 1000)
    line = (
        f"{run.run_id}|{run.attempt}|{run.deliveries}|{os.getpid()}|{start_ms}|"
        f"{scheduled_ms}|{run.schedule_id or ''}"
    )
    async with sink().pipeline(transaction=True) as p:
        p.hsetnx(EFFECTS, run.run_id, f"{os.getpid()}:{run.deliveries}")
        p.rpush(LOG, line)
        await p.execute()


@app.task(name="effect")
async def effect(payload: Any) -> None:
    await record(random.uniform(0.0, 0.01))


@app.task(name="tick")
async def tick(payload: Any) -> None:
    # Rule fires: long enough that a fire every second overlaps the next one now and then.
    await record(float((payload or {}).get("work_s", 0.0)) if isinstance(payload, dict) else 0.0)
