"""Worker process of the chaos suite: `python -m chaos_proc worker VIS_MS CONCURRENCY`.

The same as `zsched worker chaos_app:app`, except `max_deliveries` is raised: with a kill every
two seconds a run may be delivered more than the default five times, and the suite checks
accounting, not the dead-letter cap (tests/integration covers that).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from chaos_app import app

from zsched.cli.processes import _at_start  # the CLI's start-up wait for Redis


async def main(vis_ms: int, concurrency: int) -> None:
    # Built the way `zsched worker` builds it: waiting while Redis is down (a worker restarted
    # during a redis-server kill reads the queue's layout from Redis here).
    w = _at_start(
        lambda: app.worker(
            concurrency=concurrency,
            visibility_timeout_ms=vis_ms,
            max_deliveries=1000,
            block_ms=1000,
            shutdown_grace_ms=2000,
        ),
        "worker",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await w.run(stop)
    finally:
        await w.close()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(main(int(sys.argv[2]), int(sys.argv[3])))
