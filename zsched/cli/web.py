"""`zsched web`: the operator console (docs/console.md); needs the `zsched[web]` extra."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from zsched import eventloop
from zsched.cli.common import PROG, UsageError, add_event_loop, event_loop_of
from zsched.store.connection import redact


def register(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the operator console (zsched[web])",
                       description="Serve the web console over one or more queues. Actions "
                       "need ZSCHED_WEB_TOKEN or ZSCHED_WEB_USER/ZSCHED_WEB_PASSWORD; "
                       "without them the console is read-only.")  # fmt: skip
    p.add_argument("--redis", metavar="URL", default=None,
                   help="Redis URL (default: $ZSCHED_REDIS_URL, else redis://127.0.0.1:6379/0)")  # fmt: skip
    p.add_argument("--queue", action="append", dest="queues", metavar="Q", default=None,
                   help="a queue to serve, repeatable (default: $ZSCHED_QUEUE or 'default')")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--root-path", default="", help="URL prefix when served behind a proxy")
    p.add_argument("--read-only", action="store_true",
                   help="serve no action endpoint at all, whatever the credentials")  # fmt: skip
    add_event_loop(p)
    p.set_defaults(func=cmd_web)


def cmd_web(args: argparse.Namespace) -> int:
    # uvicorn makes the loop: it is told which (auto when uvloop does not import: asyncio's).
    loop = "uvloop" if eventloop.loop_factory(event_loop_of(args)) else "asyncio"
    try:
        import uvicorn

        from zsched.web.app import create_app
    except ImportError as exc:
        raise UsageError(
            f"the console needs the web extra: pip install 'zsched[web]' ({exc})"
        ) from exc
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    url = args.redis or os.environ.get("ZSCHED_REDIS_URL") or "redis://127.0.0.1:6379/0"
    queues = args.queues or [os.environ.get("ZSCHED_QUEUE", "default")]
    app = create_app(redis=url, queues=queues, read_only=args.read_only)
    state = app.state.console
    mode = f"read-only ({state.read_only_reason})" if state.read_only else "actions enabled"
    print(f"{PROG}: console for {', '.join(queues)} on {redact(url)}: {mode}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, root_path=args.root_path,
                log_level="warning", access_log=False, loop=loop)  # fmt: skip
    return 0
