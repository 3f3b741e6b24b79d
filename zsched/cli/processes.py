"""`zsched dispatcher` and `zsched worker`: the long-running processes."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import zsched
from zsched import eventloop
from zsched.cli.common import (
    PROG,
    UsageError,
    add_connection,
    add_event_loop,
    event_loop_of,
    make_app,
    partitions_arg,
)
from zsched.cli.settings_options import (
    add_dispatcher_options,
    add_worker_options,
    dispatcher_values,
    worker_values,
)
from zsched.store.retrying import wait_out

T = TypeVar("T")
log = logging.getLogger("zsched.cli")


def register(sub: Any) -> None:
    p = sub.add_parser("dispatcher", help="move due runs onto the ready stream; fire rules",
                       description="Run a dispatcher. Any number may run at once.")  # fmt: skip
    add_connection(p)
    p.add_argument("--app", dest="app_ref", metavar="MODULE:APP", default=None,
                   help="load rules declared on this App (optional)")  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve /metrics on this port, or the next free one (0: any)")  # fmt: skip
    add_dispatcher_options(p)
    _allow_eviction(p)
    add_event_loop(p)
    p.set_defaults(func=cmd_dispatcher)

    w = sub.add_parser("worker", help="run registered tasks from the ready stream",
                       description="Run a worker: a consumer in the queue's group.")  # fmt: skip
    w.add_argument("app_ref", metavar="MODULE:APP", help="where the App with the tasks lives")
    add_connection(w)
    add_worker_options(w)
    w.add_argument("--metrics-port", type=int, default=None,
                   help="serve /metrics on this port, or the next free one (0: any)")  # fmt: skip
    _allow_eviction(w)
    add_event_loop(w)
    w.set_defaults(func=cmd_worker)


def _allow_eviction(p: Any) -> None:
    p.add_argument("--allow-eviction", action="store_true",
                   help="run even if Redis's maxmemory-policy may evict zsched's keys (the "
                        "metric zsched_redis_eviction_risk says so; docs/reliability.md)")  # fmt: skip


def load_app(ref: str, args: argparse.Namespace) -> zsched.App:
    """Import MODULE:ATTR and return the App there, pointed at --redis/--queue if given."""
    if ":" not in ref:
        raise UsageError(f"expected MODULE:APP, got {ref!r}")
    mod_name, attr = ref.split(":", 1)
    sys.path.insert(0, ".")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise UsageError(f"cannot import module {mod_name!r}: {exc}") from exc
    app = getattr(mod, attr, None)
    if not isinstance(app, zsched.App):
        raise UsageError(f"{ref!r} is not a zsched.App")
    wanted = args.partitions or (app.partitions if args.queue == app.queue else None)
    if args.redis or args.queue != app.queue or wanted != app.partitions:
        parts = wanted or partitions_arg(args)
        fresh = zsched.App(args.redis or app.url, queue=args.queue, partitions=parts,
                           durable=app.durability or False,
                           durable_timeout=app.durable_timeout_ms / 1000)  # fmt: skip
        fresh.tasks.update(app.tasks)
        fresh.declared.update(app.declared)
        app = fresh
    return app


#: Processes on one host given the same --metrics-port take the next free one of this many.
METRICS_PORT_TRIES = 16


def _serve_metrics(app: zsched.App, port: int | None) -> None:
    if port is None:
        return
    from prometheus_client import start_http_server

    try:
        from zsched.observability.collector import QueueCollector

        app.metrics.registry.register(QueueCollector(app.redis, [app.queue]))
    except (ImportError, TypeError, ValueError):
        pass
    for candidate in range(port, port + METRICS_PORT_TRIES) if port else [0]:
        try:
            server, _thread = start_http_server(candidate, addr="0.0.0.0",
                                                registry=app.metrics.registry)  # fmt: skip
        except OSError:  # taken, e.g. by another worker on this host: try the next port
            continue
        # Say where, so a second worker on the same host can be found (and scraped).
        print(f"{PROG}: serving /metrics on port {server.server_port}", file=sys.stderr)
        return
    raise UsageError(f"--metrics-port: ports {port}..{port + METRICS_PORT_TRIES - 1} are all taken")


async def _until_signal(main: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    log.info("running on the %s event loop", eventloop.name(loop))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await main(stop)


def _at_start(build: Callable[[], T], role: str) -> T:
    """Build the process's App (it may read the queue's layout from Redis), waiting while
    Redis is unreachable at start-up, as the loops do later: one WARNING per outage."""
    return wait_out(build, what=f"{role} at start-up", logger=log)


def cmd_dispatcher(args: argparse.Namespace) -> int:
    loop = event_loop_of(args)
    app = _at_start(lambda: load_app(args.app_ref, args) if args.app_ref else make_app(args),
                    "dispatcher")  # fmt: skip
    settings = dispatcher_values(args)
    if not 1 <= settings.get("batch_size", 500) <= 1000:
        raise UsageError(f"--batch-size must be 1..1000, got {settings['batch_size']}")
    # Building it reads the queue's layout from Redis, which may have gone away meanwhile.
    d = _at_start(lambda: app.dispatcher(**settings, allow_eviction=args.allow_eviction),
                  "dispatcher")  # fmt: skip
    _serve_metrics(app, args.metrics_port)

    async def main(stop: asyncio.Event) -> None:
        try:
            await d.run(stop)
        finally:
            await d.close()

    eventloop.run(_until_signal(main), loop)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    loop = event_loop_of(args)
    settings = worker_values(args)
    if settings.get("concurrency", 16) < 1:
        raise UsageError(f"--concurrency must be >= 1, got {settings['concurrency']}")
    if not settings.get("visibility_timeout_ms", 30_000) > 0:
        raise UsageError("--visibility-timeout must be > 0")
    if settings.get("read_batch", 100) < 1:
        raise UsageError(f"--read-batch must be >= 1, got {settings['read_batch']}")
    app = _at_start(lambda: load_app(args.app_ref, args), "worker")
    w = _at_start(lambda: app.worker(**settings, allow_eviction=args.allow_eviction), "worker")
    _serve_metrics(app, args.metrics_port)

    async def main(stop: asyncio.Event) -> None:
        try:
            await w.run(stop, exiting=True)  # _exit_past_stuck_handlers: threads die with it
        finally:
            await w.close()

    eventloop.run(_until_signal(main), loop)
    _exit_past_stuck_handlers()
    return 0


def _exit_past_stuck_handlers() -> None:
    """After a clean shutdown (their runs handed back), do not let sync handlers that are
    still running keep the process alive: Python would join their threads at exit."""
    stuck = [t for t in threading.enumerate() if t.name.startswith("zsched") and t.is_alive()]
    if stuck:
        log.warning("exiting with %d handler thread(s) still running; their runs were "
                    "handed back", len(stuck))  # fmt: skip
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
