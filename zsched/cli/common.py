"""Shared CLI plumbing: connection options, output, errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import zsched
from zsched import eventloop
from zsched.config import event_loop_from_env
from zsched.errors import ConfigError

#: The command's name, as argparse prints it in usage and errors.
PROG = "zsched"


class UsageError(Exception):
    """A bad argument value found after parsing; exits 2 like argparse does."""


def add_connection(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis",
        metavar="URL",
        default=None,
        help="Redis URL (default: $ZSCHED_REDIS_URL, else redis://127.0.0.1:6379/0)",
    )
    p.add_argument("--queue", default=os.environ.get("ZSCHED_QUEUE", "default"),
                   help="queue name (default: $ZSCHED_QUEUE or 'default')")  # fmt: skip
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="partitions of the queue (default: recorded in Redis, else 1)")  # fmt: skip


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def make_app(args: argparse.Namespace) -> zsched.App:
    return zsched.App(args.redis, queue=args.queue, partitions=partitions_arg(args))


def partitions_arg(args: argparse.Namespace) -> int | str:
    """--partitions N, else "auto": the count recorded in Redis for the queue (else 1)."""
    n = getattr(args, "partitions", None)
    if n is None:
        return "auto"
    if not 1 <= n <= 1024:
        raise UsageError(f"--partitions must be 1..1024, got {n}")
    return int(n)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, default=str, indent=None, sort_keys=True))
    else:
        print(text)


def fail(msg: str, code: int = 1) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return code


def add_event_loop(p: Any) -> None:
    p.add_argument("--event-loop", choices=eventloop.CHOICES, default=None,
                   help="the asyncio loop to run on: auto (uvloop when installed), uvloop, "
                        "asyncio (default auto; env ZSCHED_EVENT_LOOP)")  # fmt: skip


def event_loop_of(args: argparse.Namespace) -> str:
    """--event-loop, else ZSCHED_EVENT_LOOP, else auto; checked before anything else starts
    (a bad variable, or uvloop asked for and not installed: exit 2, naming it)."""
    try:
        choice = getattr(args, "event_loop", None) or event_loop_from_env()
        eventloop.loop_factory(choice)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    return choice
