"""`zsched pause|resume|drain`: hold a queue's dispatch for a deploy, and wait for it to drain."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from zsched.cli.common import add_connection, add_json, emit, make_app
from zsched.cli.enqueue import parse_seconds


def register(sub: Any) -> None:
    p = sub.add_parser("pause", help="pause a queue: dispatchers move nothing to the stream",
                       description="Pause a queue: delayed runs and rule fires wait; workers "
                                   "finish what is on the stream. `zsched resume` ends it.")  # fmt: skip
    p.add_argument("--note", default=None, help="why (shown by status)")
    add_connection(p)
    add_json(p)
    p.set_defaults(func=cmd_pause)
    r = sub.add_parser("resume", help="end a queue's pause and wake its dispatchers")
    add_connection(r)
    add_json(r)
    r.set_defaults(func=cmd_resume)
    d = sub.add_parser("drain", help="pause a queue and wait until its stream is empty",
                       description="For deploys: pause the queue, then wait until every run "
                                   "already on the ready stream finished (or --timeout), "
                                   "printing progress. The queue stays paused.")  # fmt: skip
    d.add_argument("--timeout", default=None, metavar="SECONDS", help="give up after this long")
    d.add_argument("--every", default="1", metavar="SECONDS", help="progress interval (1 s)")
    add_connection(d)
    add_json(d)
    d.set_defaults(func=cmd_drain)


def cmd_pause(args: argparse.Namespace) -> int:
    now = make_app(args).pause_queue(args.note)
    emit(args, {"paused": True, "changed": now}, "paused" if now else "already paused")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    done = make_app(args).resume_queue()
    emit(args, {"resumed": done}, "resumed" if done else "not paused")
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    timeout = parse_seconds(args.timeout, "--timeout") if args.timeout is not None else None
    every = parse_seconds(args.every, "--every")
    app = make_app(args)

    def progress(st: Any) -> None:
        if not args.json:
            at = datetime.now(UTC).strftime("%H:%M:%S")
            print(f"{at} stream {st.stream_length} (pending {st.pending}), delayed {st.delayed}",
                  flush=True)  # fmt: skip

    drained = app.drain(timeout=timeout, progress=progress, poll=max(0.05, every))
    st = app.status()
    text = "drained: the stream is empty; the queue stays paused (zsched resume)" if drained \
        else f"timed out: {st.stream_length} runs still on the stream; the queue stays paused"  # fmt: skip
    emit(args, {"drained": drained, "stream_length": st.stream_length, "paused": st.paused}, text)
    return 0 if drained else 1
