"""`zsched pause|resume|drain`: hold a queue's dispatch for a deploy, and wait for it to drain;
`zsched entries`: the ready stream's entry shape, and the switch after an upgrade."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from zsched.cli.common import add_connection, add_json, emit, make_app
from zsched.cli.enqueue import parse_seconds
from zsched.runs import entry_shape


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
    e = sub.add_parser(
        "entries", help="show or switch the shape of the entries dispatchers write",
        description="Show the shape of the entries dispatchers write on the ready stream "
                    "(plain, or tagged: cheaper for Redis), and the workers that read it. "
                    "`tagged` switches a queue created before zsched 0.4 once every worker "
                    "reading it is 0.4 or later: it refuses while a consumer that did not "
                    "register as a reader of tagged entries read the stream within "
                    "--idle-over. `plain` switches back, before a rollback of workers "
                    "(docs/operations.md).")  # fmt: skip
    e.add_argument("shape", nargs="?", choices=entry_shape.SHAPES, help="switch to this shape")
    idle_s = entry_shape.DEFAULT_IDLE_OVER_MS // 1000
    e.add_argument("--idle-over", default=str(idle_s), metavar="SECONDS",
                   help=f"a consumer idle longer than this has stopped ({idle_s} s)")  # fmt: skip
    e.add_argument("--force", action="store_true",
                   help="switch to tagged even with such consumers (they dead-letter tagged "
                   "entries, which a replay recovers)")  # fmt: skip
    add_connection(e)
    add_json(e)
    e.set_defaults(func=cmd_entries)


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


def cmd_entries(args: argparse.Namespace) -> int:
    idle_over_ms = int(parse_seconds(args.idle_over, "--idle-over") * 1000)
    app = make_app(args)
    before = app.entry_shapes()
    blocking = [c for p in before for c in p.blocking(idle_over_ms)]
    refused = args.shape == "tagged" and not args.force and bool(blocking)
    if args.shape and not refused:
        app.set_entry_shape(args.shape)
    after = app.entry_shapes() if args.shape else before
    shapes = sorted({p.shape for p in after})
    shape = shapes[0] if len(shapes) == 1 else "mixed"
    lines = [f"entries: {shape}" + ("" if len(shapes) == 1 else f" ({', '.join(shapes)})")]
    for p in after:
        where = "" if p.partition is None else f"partition {p.partition}: "
        for c in p.consumers:
            reads = c.reads or "plain only (did not register: zsched 0.3 or another reader)"
            lines.append(f"  {where}{c.name} idle {c.idle_ms / 1000:.0f} s, "
                         f"pending {c.pending}, reads {reads}")  # fmt: skip
    if refused:
        names = sorted({c.name for c in blocking})
        lines.append(f"refused: {len(names)} consumer(s) that may read only plain entries "
                     f"read the stream within {args.idle_over} s: {', '.join(names)}; "
                     "upgrade or stop them, or pass --force")  # fmt: skip
    changed = bool(args.shape) and not refused and any(p.shape != args.shape for p in before)
    emit(args, {"shape": shape, "changed": changed, "refused": refused,
                "partitions": [p.as_dict() for p in after]}, "\n".join(lines))  # fmt: skip
    return 1 if refused else 0
