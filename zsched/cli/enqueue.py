"""`zsched enqueue TASK`: schedule one run."""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime
from typing import Any

from zsched.cli.common import UsageError, add_connection, add_json, emit, make_app


def register(sub: Any) -> None:
    p = sub.add_parser("enqueue", help="schedule one run of a task",
                       description="Schedule one run. Without --at/--in it is due now.")  # fmt: skip
    p.add_argument("task", help="registered task name")
    add_connection(p)
    p.add_argument("--payload", default=None, metavar="JSON", help="payload as JSON")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", default=None, metavar="ISO",
                      help="due time, ISO-8601 with an offset (e.g. 2026-12-01T09:00:00+01:00)")  # fmt: skip
    when.add_argument("--in", dest="delay", default=None, metavar="SECONDS",
                      help="due this many seconds from now")  # fmt: skip
    p.add_argument("--id", dest="run_id", default=None, metavar="RUN_ID",
                   help="idempotency key; a live or recently done id is a duplicate")  # fmt: skip
    p.add_argument("--on-conflict", choices=("keep", "replace", "debounce"), default="keep",
                   help="when the id is waiting: keep it (default), replace its payload and due, "
                        "or debounce (push the due back, at most --max-delay after the first)")  # fmt: skip
    p.add_argument("--max-delay", default=None, metavar="SECONDS",
                   help="with --on-conflict debounce: the latest due, after the first enqueue")  # fmt: skip
    add_json(p)
    p.set_defaults(func=cmd_enqueue)


def parse_at(value: str) -> datetime:
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--at {value!r} is not an ISO-8601 time") from None
    if dt.tzinfo is None:
        raise UsageError(f"--at {value!r} has no UTC offset; add one, e.g. {value}+00:00")
    return dt


def parse_seconds(value: str, flag: str = "--in") -> float:
    try:
        s = float(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not a number of seconds") from None
    if not math.isfinite(s) or s < 0:
        raise UsageError(f"{flag} {value!r} must be a finite number >= 0")
    return s


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = None
    if args.payload is not None:
        try:
            payload = json.loads(args.payload)
        except ValueError as exc:
            raise UsageError(f"--payload is not valid JSON: {exc}") from None
    run_at = parse_at(args.at) if args.at else None
    delay = parse_seconds(args.delay) if args.delay is not None else None
    max_delay = parse_seconds(args.max_delay, "--max-delay") if args.max_delay else None
    if (args.on_conflict == "debounce") != (max_delay is not None):
        raise UsageError("--on-conflict debounce needs --max-delay, and only it takes one")
    app = make_app(args)
    rid = app.enqueue(args.task, payload, run_at=run_at, delay=delay, run_id=args.run_id,
                      on_conflict=args.on_conflict, max_delay=max_delay)  # fmt: skip
    text = f"{rid} (duplicate: already live or recently done)" if rid.duplicate else str(rid)
    if rid.replaced:
        text = f"{rid} ({rid.outcome.value}: the waiting run took the new payload and due)"
    emit(args, {"run_id": str(rid), "duplicate": rid.duplicate, "replaced": rid.replaced,
                "outcome": rid.outcome.value}, text)  # fmt: skip
    return 0
