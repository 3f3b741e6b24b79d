"""`zsched celery-bridge MODULE:CELERY_APP`: send a queue's Celery fires to Celery.

With `--beat-schedule` it also declares the Celery app's beat_schedule as rules, and with
`--dispatch` it runs a dispatcher in the same process: `zsched celery-bridge proj.celery:app
--beat-schedule --dispatch`, in two or more copies, replaces `celery beat` (docs/celery.md).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from typing import Any

from zsched import eventloop
from zsched.cli.common import UsageError, add_connection, add_event_loop, event_loop_of, make_app


def register(sub: Any) -> None:
    p = sub.add_parser("celery-bridge", help="send the queue's Celery fires to Celery",
                       description="Run the Celery bridge: a zsched worker that sends each "
                       "fire with send_task(task_id=<run id>). Any number may run at once.")  # fmt: skip
    p.add_argument("celery_ref", metavar="MODULE:CELERY_APP",
                   help="where the Celery app lives (e.g. proj.celery:app)")  # fmt: skip
    add_connection(p)
    p.add_argument("--beat-schedule", action="store_true",
                   help="declare the Celery app's beat_schedule as rules (synced at start)")  # fmt: skip
    p.add_argument("--dispatch", action="store_true",
                   help="also run a dispatcher in this process")  # fmt: skip
    p.add_argument("--concurrency", type=int, default=16,
                   help="sends (and overlap waits) at once (default 16)")  # fmt: skip
    p.add_argument("--visibility-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="reclaim fires of a bridge silent this long (default 30)")  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve /metrics on this port, or the next free one (0: any)")  # fmt: skip
    add_event_loop(p)
    p.set_defaults(func=cmd_celery_bridge)


def load_celery(ref: str) -> Any:
    """Import MODULE:ATTR (ATTR defaults to `app`, then `celery`) and return the Celery app."""
    try:
        from celery import Celery
    except ImportError as exc:
        raise UsageError("the Celery bridge needs Celery: pip install 'zsched[celery]'") from exc
    mod_name, _, attr = ref.partition(":")
    sys.path.insert(0, ".")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise UsageError(f"cannot import module {mod_name!r}: {exc}") from exc
    names = [attr] if attr else ["app", "celery"]
    for name in names:
        obj = getattr(mod, name, None)
        if isinstance(obj, Celery):
            return obj
    raise UsageError(f"{ref!r} is not a Celery app")


def cmd_celery_bridge(args: argparse.Namespace) -> int:
    from zsched.cli.processes import _at_start, _serve_metrics, _until_signal
    from zsched.integrations.celery import from_beat_schedule, register_bridge

    loop = event_loop_of(args)
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1, got {args.concurrency}")
    if not args.visibility_timeout > 0:
        raise UsageError(f"--visibility-timeout must be > 0, got {args.visibility_timeout}")
    celery_app = load_celery(args.celery_ref)
    app = _at_start(lambda: make_app(args), "celery-bridge")
    register_bridge(app, celery_app)
    if args.beat_schedule:
        from_beat_schedule(celery_app, app)
        if not args.dispatch:  # a dispatcher syncs declared rules when it starts
            app.sync_schedules()
    w = app.worker(concurrency=args.concurrency,
                   visibility_timeout_ms=int(args.visibility_timeout * 1000))  # fmt: skip
    d = app.dispatcher() if args.dispatch else None
    _serve_metrics(app, args.metrics_port)

    async def main(stop: asyncio.Event) -> None:
        loops = [w.run(stop)] + ([d.run(stop)] if d is not None else [])
        try:
            await asyncio.gather(*loops)
        finally:
            await w.close()
            if d is not None:
                await d.close()

    eventloop.run(_until_signal(main), loop)
    return 0
