"""`zsched status`: a queue at a glance."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .common import add_connection, add_json, emit, make_app


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="counts and ages of a queue",
                       description="Delayed runs, due backlog, stream, pending, dead letters.")  # fmt: skip
    add_connection(p)
    add_json(p)
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")  # fmt: skip
    p.set_defaults(func=cmd_status)


def render(st: Any) -> str:
    rows = [
        ("queue", st.queue),
        ("delayed", st.delayed),
        ("due backlog", f"{st.due} (oldest {st.oldest_due_age_ms / 1000:.1f}s)"),
        ("stream length", st.stream_length),
        ("pending", f"{st.pending} (oldest idle {st.oldest_pending_idle_ms / 1000:.1f}s)"),
        ("dead letters", st.dead),
        ("done records", st.done_records),
    ]
    rows += [(f"count: {k}", v) for k, v in sorted(st.stats.items())]
    return "\n".join(f"{k:<22} {v}" for k, v in rows)


def cmd_status(args: argparse.Namespace) -> int:
    app = make_app(args)
    while True:
        st = app.status()
        if args.watch and not args.json:
            print("\033[2J\033[H", end="")
        emit(args, st.as_dict(), render(st))
        if not args.watch:
            return 0
        time.sleep(args.watch)
