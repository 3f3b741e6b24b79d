"""`zsched runs show|cancel|reschedule ID`: one run's state and times; change it."""

from __future__ import annotations

import argparse
from typing import Any

from zsched.cli.common import add_connection, add_json, emit, make_app
from zsched.cli.enqueue import parse_at, parse_seconds
from zsched.clock import ms_to_datetime


def register(sub: Any) -> None:
    p = sub.add_parser("runs", help="inspect runs", description="Inspect runs.")
    rs = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    s = rs.add_parser("show", help="state and times of one run")
    s.add_argument("run_id")
    add_connection(s)
    add_json(s)
    s.set_defaults(func=cmd_show)
    c = rs.add_parser("cancel", help="cancel a run: delayed or ready runs go now, a running "
                      "run is asked to stop")  # fmt: skip
    c.add_argument("run_id")
    add_connection(c)
    add_json(c)
    c.set_defaults(func=cmd_cancel)
    m = rs.add_parser("reschedule", help="move a run that is still delayed to a new due time",
                      description="Move a delayed run to a new due time (--at or --in).")  # fmt: skip
    m.add_argument("run_id")
    when = m.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", default=None, metavar="ISO",
                      help="new due time, ISO-8601 with an offset")  # fmt: skip
    when.add_argument("--in", dest="delay", default=None, metavar="SECONDS",
                      help="due this many seconds from now (Redis clock)")  # fmt: skip
    add_connection(m)
    add_json(m)
    m.set_defaults(func=cmd_reschedule)


def cmd_show(args: argparse.Namespace) -> int:
    st = make_app(args).get_run(args.run_id)
    d = st.as_dict()
    emit(args, d, "\n".join(f"{k:<14} {v}" for k, v in d.items() if v is not None))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    res = make_app(args).cancel(args.run_id)
    emit(args, res.as_dict(), _CANCEL_TEXT[res.outcome.name.lower()])
    return 0 if res.cancelled or res.requested else 1


_CANCEL_TEXT = {
    "cancelled_delayed": "cancelled (it was waiting in the delayed set)",
    "cancelled_ready": "cancelled (it was dispatched, no worker had read it)",
    "requested": "cancel requested: the worker running it stops it and it ends cancelled",
    "not_found": "not cancelled: no such run",
    "done": "not cancelled: it is done already",
    "already_cancelled": "not cancelled: it was cancelled already",
}


def cmd_reschedule(args: argparse.Namespace) -> int:
    run_at = parse_at(args.at) if args.at else None
    delay = parse_seconds(args.delay) if args.delay is not None else None
    res = make_app(args).reschedule(args.run_id, run_at=run_at, delay=delay)
    if res.moved and res.due_ms is not None:
        when = ms_to_datetime(res.due_ms).isoformat()
        text = f"moved: due {when}"
    else:
        text = f"not moved: {_WHY[res.outcome.name.lower()]}"
    emit(args, res.as_dict(), text)
    return 0 if res.moved else 1


_WHY = {
    "not_found": "no such run (never enqueued, cancelled, or older than the dedupe window)",
    "ready": "already dispatched (on the ready stream)",
    "running": "already running",
    "done": "already done",
    "dead": "dead-lettered",
}
