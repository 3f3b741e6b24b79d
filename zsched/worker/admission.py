"""The worker's side of task limits (zsched/worker/limits.py): admit a run, vacate its share.

Before a limited task's handler starts, the worker acquires a share; a run that gets none is
deferred back to the delayed set (retry.lua with the same envelope: no attempt used). Shares
of the semaphore are renewed with the worker's holds.
"""

from __future__ import annotations

import logging
import random

from zsched.protocol.envelope import Envelope
from zsched.worker.context import WorkerContext
from zsched.worker.delivery import Delivery
from zsched.worker.limits import DEFER_MS, acquire, limit_id
from zsched.worker.tasks import Task
from zsched.worker.writer import Writer

log = logging.getLogger("zsched.worker.limits")


async def admit(ctx: WorkerContext, writer: Writer, d: Delivery, env: Envelope, task: Task) -> bool:
    """Acquire the run's share; False = deferred (its retry is buffered, no attempt used)."""
    limits = task.limits
    if limits is None:  # the Runner sends only tasks with limits
        return True
    q = ctx.queue
    try:
        d.limit_key = limits.key_for(env.payload)
    except Exception as exc:  # noqa: BLE001 - the user's function: its failure is the run's
        writer.dead(d, f"limit_key failed: {type(exc).__name__}: {exc}"[:2000], "failed", task.name)
        return False
    call = acquire(ctx.keys, task.name, d.limit_key, d.entry_id, d.run_id, limits,
                   hold_ms=ctx.settings.visibility_timeout_ms, now_ms=ctx.clock.now_ms())  # fmt: skip
    got = await ctx.scripts.run(call)
    ctx.metrics.limit_waiting.labels(q, task.name).set(got.waiting)
    if got.granted:
        d.limited = True
        return True
    wait = got.wait_ms
    if limits.max_concurrency and not limits.rate_per_s:
        wait += random.randint(0, min(wait, DEFER_MS))  # full semaphore: spread the retries
    writer.retries.append((d.entry_id, d.run_id, wait, d.raw))
    ctx.metrics.limit_deferred.labels(q, task.name).inc()
    return False


async def vacate(ctx: WorkerContext, d: Delivery, task: Task) -> None:
    """Give the run's place in the semaphore back as soon as its handler ended."""
    if d.limited and task.limits is not None and task.limits.max_concurrency:
        await ctx.redis.zrem(ctx.keys.limit_holders(limit_id(task.name, d.limit_key)), d.entry_id)


async def renew(ctx: WorkerContext, running: dict[str, Delivery]) -> None:
    """Keep the semaphore shares of the runs executing (with the worker's hold renewal)."""
    for d in list(running.values()):
        task = ctx.tasks.get(d.task_name or "")
        if not (d.limited and task is not None and task.limits and task.limits.max_concurrency):
            continue
        call = acquire(ctx.keys, task.name, d.limit_key, d.entry_id, d.run_id, task.limits,
                       hold_ms=ctx.settings.visibility_timeout_ms, now_ms=ctx.clock.now_ms(),
                       renew=True)  # fmt: skip
        if not (await ctx.scripts.run(call)).granted:
            log.warning("run %s of %s lost its concurrency share (renewed too late)", d.run_id,
                        task.name, extra={"queue": ctx.queue, "run_id": d.run_id})  # fmt: skip
