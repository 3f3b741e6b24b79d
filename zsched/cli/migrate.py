"""`zsched migrate`: move an older zsched's delayed runs into the current key layout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zsched.cli.common import add_connection, add_json, emit, make_app


def register(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="move delayed runs of key layout 2 (zsched 0.1) into key layout 3",
        description="Move the delayed runs an older zsched kept in one ZSET into the B-tree of "
        "key layout 3, a batch of 1,000 per call, in every partition. Safe while the queue "
        "runs; a dispatcher does the same when it starts. Prints how many runs were moved.",
    )
    add_connection(p)
    add_json(p)
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    app = make_app(args)

    def progress(moved: int, left: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\rmoved {moved:,}, {left:,} left", end="", file=sys.stderr, flush=True)

    moved = app.migrate(progress)
    if not args.json and sys.stderr.isatty():
        print(file=sys.stderr)
    emit(args, {"queue": app.queue, "moved": moved}, f"moved {moved:,} delayed runs")
    return 0
