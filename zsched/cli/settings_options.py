"""Command-line options and environment variables for every field of WorkerSettings and
DispatcherSettings, from one table (docs/operations.md, "Process settings", lists the same).

A flag beats its environment variable, which beats the default. Durations are given in
seconds on the command line and in the field's own unit (milliseconds) in the environment,
named after the field: `--visibility-timeout 2` or `ZSCHED_WORKER_VISIBILITY_TIMEOUT_MS=2000`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zsched.cli.common import UsageError
from zsched.config import RENAMED, DispatcherSettings, WorkerSettings, from_env

WORKER_ENV = "ZSCHED_WORKER_"
DISPATCHER_ENV = "ZSCHED_DISPATCHER_"


@dataclass(frozen=True)
class Option:
    """One settings field as a flag: `--flag`, in seconds when the field is in ms."""

    field: str
    flag: str
    help: str

    @property
    def seconds(self) -> bool:
        return self.field.endswith("_ms")

    def env(self, prefix: str) -> str:
        return prefix + self.field.upper()


WORKER_OPTIONS = (
    Option("concurrency", "--concurrency", "handlers at once"),
    Option("visibility_timeout_ms", "--visibility-timeout",
           "reclaim runs of a worker silent this long"),
    Option("read_batch", "--read-batch", "entries read per XREADGROUP call at most"),
    Option("max_unwritten_acks", "--max-unwritten-acks",
           "finished runs whose ack is not written yet that hold no handler slot"),
    Option("read_ahead", "--read-ahead",
           "entries a read may take beyond the free handler slots (they wait, held)"),
    Option("max_read_ahead_bytes", "--max-read-ahead-bytes",
           "memory budget of the entries read ahead"),
    Option("block_ms", "--block", "how long one blocking read waits for new entries"),
    Option("max_deliveries", "--max-deliveries",
           "an entry delivered more often than this is dead-lettered"),
    Option("shutdown_grace_ms", "--shutdown-grace",
           "on SIGTERM, wait this long for running handlers"),
    Option("max_attempts", "--max-attempts", "attempts of a task that sets none"),
    Option("max_backoff_ms", "--max-backoff", "longest backoff between attempts"),
)  # fmt: skip

DISPATCHER_OPTIONS = (
    Option("batch_size", "--batch-size", "runs per dispatch call (1..1000)"),
    Option("max_batches_per_tick", "--max-batches-per-tick",
           "dispatch calls per tick before rules get a turn"),
    Option("max_backlog", "--max-backlog",
           "dispatch nothing while the stream holds this many entries (0 = no limit)"),
    Option("max_idle_ms", "--max-idle", "longest sleep without hearing from Redis"),
    Option("backlog_poll_ms", "--backlog-poll", "sleep while the backlog limit stops dispatch"),
)  # fmt: skip


def _defaults(cls: type[Any]) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def add_options(p: argparse.ArgumentParser, options: tuple[Option, ...], cls: type[Any],
                prefix: str) -> None:  # fmt: skip
    """One flag per option; its default shows the field's default and environment variable."""
    defaults = _defaults(cls)
    for o in options:
        default = defaults[o.field]
        if o.seconds:
            shown = f"{default / 1000:g} s"
            p.add_argument(o.flag, type=float, default=None, metavar="SECONDS",
                           help=f"{o.help} (default {shown}; env {o.env(prefix)} in ms)")  # fmt: skip
        else:
            p.add_argument(o.flag, type=int, default=None,
                           help=f"{o.help} (default {default}; env {o.env(prefix)})")  # fmt: skip


def values(args: argparse.Namespace, options: tuple[Option, ...], cls: type[Any], prefix: str,
           environ: Mapping[str, str] | None = None) -> dict[str, int]:  # fmt: skip
    """The settings the environment and the flags give (a flag wins); ConfigError names a
    bad variable, UsageError a bad flag."""
    env = os.environ if environ is None else environ
    old = {new: o for o, new in RENAMED.get(cls, {}).items()}
    out = {k: v for k, v in dataclasses.asdict(from_env(cls, prefix, env)).items()
           if o_env_given(k, prefix, env) or (k in old and o_env_given(old[k], prefix, env))}  # fmt: skip
    for o in options:
        given = getattr(args, o.flag[2:].replace("-", "_"))
        if given is None:
            continue
        if o.seconds:
            if not (math.isfinite(given) and given >= 0):
                raise UsageError(f"{o.flag} must be seconds >= 0, got {given}")
            out[o.field] = int(round(given * 1000))
        else:
            out[o.field] = int(given)
    return out


def o_env_given(field: str, prefix: str, env: Mapping[str, str]) -> bool:
    return prefix + field.upper() in env


def add_worker_options(p: argparse.ArgumentParser) -> None:
    add_options(p, WORKER_OPTIONS, WorkerSettings, WORKER_ENV)


def worker_values(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, int]:
    return values(args, WORKER_OPTIONS, WorkerSettings, WORKER_ENV, environ)


class _Deprecated(argparse.Action):
    """A flag's old spelling: stores into the new flag's place and says so on stderr."""

    def __call__(self, parser: Any, ns: argparse.Namespace, value: Any, flag: Any = None) -> None:
        print(f"{parser.prog}: {flag} is deprecated, use {self.metavar}", file=sys.stderr)
        setattr(ns, self.dest, value)


def add_dispatcher_options(p: argparse.ArgumentParser) -> None:
    add_options(p, DISPATCHER_OPTIONS, DispatcherSettings, DISPATCHER_ENV)
    # The old name of --backlog-poll ("held" is a worker's hold on an entry now).
    p.add_argument("--held-poll", dest="backlog_poll", type=float, default=None,
                   action=_Deprecated, metavar="--backlog-poll", help=argparse.SUPPRESS)  # fmt: skip


def dispatcher_values(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, int]:
    return values(args, DISPATCHER_OPTIONS, DispatcherSettings, DISPATCHER_ENV, environ)
