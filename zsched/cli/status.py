"""`zsched status`: a queue at a glance."""

from __future__ import annotations

import argparse
import time
from typing import Any

from zsched.cli.common import add_connection, add_json, emit, make_app


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
    if getattr(st, "paused", False):
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((st.paused_ms or 0) / 1000))
        rows.insert(
            1, ("PAUSED", f"since {since}" + (f": {st.pause_note}" if st.pause_note else ""))
        )
    # Per-rule counts (ledger:..., duplicate:backfill:...) are in --json and the metrics.
    rows += [(f"count: {k}", v) for k, v in sorted(st.stats.items())
             if not k.startswith(("ledger:", "duplicate:backfill:"))]  # fmt: skip
    return "\n".join(f"{k:<22} {v}" for k, v in rows)


def render_partitions(parts: list[Any], total: Any) -> str:
    """One line per partition and the total, for a partitioned queue."""
    head = f"{'partition':<16} {'delayed':>9} {'due':>9} {'stream':>9} {'pending':>9} {'dead':>7}"
    lines = [head]
    for p in [*parts, total]:
        name = p.queue if p is not total else "total"
        lines.append(f"{name:<16} {p.delayed:>9} {p.due:>9} {p.stream_length:>9} "
                     f"{p.pending:>9} {p.dead:>7}")  # fmt: skip
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    app = make_app(args)
    while True:
        st = app.status()
        data, text = st.as_dict(), render(st)
        if app.partitions > 1:
            parts = app.partition_statuses()
            data["partitions"] = [p.as_dict() for p in parts]
            text = f"{render_partitions(parts, st)}\n\n{text}"
        if args.watch and not args.json:
            print("\033[2J\033[H", end="")
        emit(args, data, text)
        if not args.watch:
            return 0
        time.sleep(args.watch)
