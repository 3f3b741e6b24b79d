"""`zsched` entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

import redis.exceptions

from zsched._version import __version__
from zsched.cli import (
    celery_bridge,
    dead,
    enqueue,
    lua,
    migrate,
    processes,
    queue,
    runs,
    schedules,
    status,
    web,
)
from zsched.cli.common import PROG, UsageError, fail
from zsched.errors import RuleError, UnreadableRule, ZschedError
from zsched.observability.logs import LOG_FORMATS, configure_logging
from zsched.store.connection import redact_text

MODULES = [processes, enqueue, status, runs, dead, migrate, schedules, queue, web,
           celery_bridge, lua]  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors echo the arguments (an unknown option's value may be a URL
    with a password): redacted. Subcommand parsers are made of the same class."""

    def error(self, message: str) -> NoReturn:
        super().error(redact_text(message))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, description="zsched — a durable scheduler for future work, built on Redis."
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv debug)")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                   help="text (default) or json: one object a line, with run_id, task, attempt, "
                   "queue and schedule_id on lines about a run (default: $ZSCHED_LOG_FORMAT)")  # fmt: skip
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for m in MODULES:
        m.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(
            args.log_format, [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
        )
    except ValueError as exc:  # a bad $ZSCHED_LOG_FORMAT
        return fail(str(exc), 2)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        return fail(str(exc), 2)
    except redis.exceptions.AuthenticationError as exc:
        return fail(f"Redis refused the credentials: {redact_text(str(exc))}")
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.RedisClusterException,  # an unreachable cluster; not a RedisError
    ) as exc:
        return fail(f"cannot reach Redis: {redact_text(str(exc))}")
    except UnreadableRule as exc:  # the stored rule's fault, not the command line's
        return fail(redact_text(str(exc)))
    except RuleError as exc:  # a bad --cron, --tz, --every ...: the command line's fault
        parser.print_usage(sys.stderr)
        return fail(redact_text(str(exc)), 2)
    except (ZschedError, ValueError) as exc:
        return fail(redact_text(str(exc)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
