"""A zsched dispatcher or worker process for the benchmark: `python -m bench.zsched_proc ROLE`.

The worker registers one task `noop` that reports progress (bench/reporter.py): a no-op, or
the I/O wait of an io workload (bench/handler.py), async or sync as the workload asks.
Both stop gracefully on SIGTERM, as `zsched dispatcher` / `zsched worker` do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import time
from typing import Any

import zsched
from zsched.observability.metrics import Metrics

from . import handler
from .reporter import Reporter, say


def register(app: zsched.App, rep: Reporter, sync: bool, probe: Any) -> None:
    """The task `noop`: async, or sync (run in the worker's thread pool); with the io
    workloads' wait after the hit (the no-op stays as it was: no extra await per run)."""
    kind, wait_s = handler.spec()
    if sync or kind == "sync":

        @app.task(name="noop")
        def noop_sync(payload: object) -> None:
            rep.hit(payload)
            if wait_s:
                time.sleep(wait_s)
    elif wait_s:

        @app.task(name="noop")
        async def io(payload: object) -> None:
            rep.hit(payload)
            await asyncio.sleep(wait_s)
    else:

        @app.task(name="noop")
        async def noop(payload: object) -> None:
            rep.hit(payload)
            if probe is not None:
                probe.run(payload)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["worker", "dispatcher", "both"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--settings", default="{}", help="JSON of Worker/DispatcherSettings")
    ap.add_argument("--lags", default=None, help="file prefix for the lags at exit")
    ap.add_argument("--dedupe-ms", type=int, default=None, help="QueueSettings.dedupe_window_ms")
    ap.add_argument("--sync", action="store_true", help="register a sync handler instead")
    ap.add_argument("--probe", default=None, help="file prefix: record where lag comes from")
    a = ap.parse_args()
    probe = None
    if a.probe:
        from .lagprobe import Probe

        probe = Probe(a.probe, a.role)
    logging.basicConfig(level=logging.WARNING)
    qs = zsched.QueueSettings(dedupe_window_ms=a.dedupe_ms) if a.dedupe_ms else None
    app = zsched.App(a.url, queue=a.queue, metrics=Metrics(), settings=qs)
    rep = Reporter(a.lags) if a.role != "dispatcher" else None
    if rep is not None:
        register(app, rep, a.sync, probe)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    settings = json.loads(a.settings)
    procs = []
    if a.role != "dispatcher":  # "both": a dispatcher in the worker's process and event loop
        procs.append(app.worker(**settings))
        await procs[0].setup()
    if a.role != "worker":
        procs.append(app.dispatcher(**(settings if a.role == "dispatcher" else {})))
    if probe is not None:
        probe.start()
    say("ready")
    await asyncio.gather(*(p.run(stop) for p in procs))
    for p in procs:
        await p.close()
    if probe is not None:
        probe.dump()
    if rep is not None:
        rep.dump()


if __name__ == "__main__":
    try:  # as `zsched worker` runs: uvloop where installed, unless ZSCHED_EVENT_LOOP says so
        from zsched import eventloop
        from zsched.config import event_loop_from_env
    except ImportError:  # a tree before zsched.eventloop (an A/B against an older main)
        asyncio.run(main())
    else:
        eventloop.run(main(), event_loop_from_env())
