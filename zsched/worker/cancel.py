"""Cooperative cancel on the worker's side: hear cancel requests, stop the handlers.

`app.cancel(run_id)` on a running run writes a cancel request (revoke.lua) naming the stream
entry of the attempt. Each hold renewal pass, the worker reads the requests of the runs it is
executing (one MGET, only while it runs something) and, for each one addressed to its entry,
cancels an async handler's task or sets a sync handler's `current_run().cancel_requested`.
When the handler stops, however it stops, the run ends `cancelled` (discard.lua).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zsched.protocol.text import lossy_text
from zsched.worker.delivery import Delivery

if TYPE_CHECKING:
    from zsched.worker.context import WorkerContext


async def check_cancels(ctx: WorkerContext, executing: dict[str, Delivery]) -> int:
    """Act on the cancel requests of the runs executing; returns how many it heard."""
    running = [d for d in list(executing.values()) if not d.cancel_seen and d.run_id]
    if not running:
        return 0
    k = ctx.keys
    values = await ctx.redis.mget([k.cancel_request(d.run_id) for d in running])
    heard = 0
    for d, v in zip(running, values, strict=True):
        if v is not None and lossy_text(v) == d.entry_id:
            request(d)
            heard += 1
    return heard


def request(d: Delivery) -> None:
    """Ask one executing run to stop."""
    d.cancel_seen = True
    if d.info is not None:
        d.info._cancel[0] = True
    if d.is_async and d.exec_task is not None and not d.exec_task.done():
        d.exec_task.cancel()
