"""Frozen settings. `ZSCHED_*` environment variables are read here, at start-up, never at import.

An unknown setting name is an error, not ignored: `settings_from(Cls, {...})` and
`from_env(Cls)` both raise ConfigError naming it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from zsched.errors import ConfigError

T = TypeVar("T")


#: Largest accepted payload (bytes, msgpack-encoded) unless QueueSettings says otherwise:
#: spelled here, the bottom layer, and named in zsched/protocol/limits.py with the others.
DEFAULT_MAX_PAYLOAD_BYTES = 512 * 1024


@dataclass(frozen=True)
class QueueSettings:
    """Settings that enqueue, dispatcher and worker of one queue share."""

    #: A completed run id stays a duplicate this long (ms).
    dedupe_window_ms: int = 3_600_000
    #: Largest accepted payload (bytes, msgpack-encoded).
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    #: How long enqueue and rule operations retry, with backoff, through a failover or a
    #: lost connection before they raise RedisUnavailable (ms); 0 = raise at once.
    outage_retry_ms: int = 10_000


@dataclass(frozen=True)
class DispatcherSettings:
    """How a dispatcher moves due runs."""

    #: Runs moved per dispatch call (1..1000); bounds the time one script holds Redis.
    batch_size: int = 500
    #: Dispatch calls per tick before other work (rules) gets a turn.
    max_batches_per_tick: int = 20
    #: Dispatch nothing while the ready stream holds this many entries; 0 = no limit.
    max_backlog: int = 50_000
    #: Longest sleep without hearing from Redis (ms); a safety net for lost wake-ups.
    max_idle_ms: int = 30_000
    #: Sleep while the backlog limit stops dispatch (ms). Was `held_poll_ms` (deprecated
    #: alias: the keyword, the attribute, ZSCHED_DISPATCHER_HELD_POLL_MS and --held-poll).
    backlog_poll_ms: int = 20

    @property
    def held_poll_ms(self) -> int:
        """Deprecated: `backlog_poll_ms` ("held" now means a worker's hold on an entry)."""
        return self.backlog_poll_ms


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker consumes runs."""

    #: Runs held at once (running, or finished with their outcome not yet written). 64: with
    #: fewer, a worker of millisecond I/O-bound handlers waits on round trips (16 ran at ~0.5x
    #: the speed of 64, BENCHMARKS.md "CLI defaults"); the memory held is bounded by it
    #: (64 payloads), and sync handlers get a thread pool of this size.
    concurrency: int = 64
    #: A pending entry idle this long is reclaimed by another worker (ms).
    visibility_timeout_ms: int = 30_000
    #: Entries read per XREADGROUP call at most.
    read_batch: int = 100
    #: Finished runs whose ack is not written yet that do not hold a handler slot: reads run
    #: ahead of the writes by this many (+11 % / +24 % end to end at concurrency 50, against 0;
    #: BENCHMARKS.md); a worker holds at most concurrency + this many pending entries. 0: an
    #: ack holds its slot.
    max_unwritten_acks: int = 1000
    #: Entries a read may take beyond the free handler slots; they wait in the worker (held,
    #: renewed, handed back at shutdown or when every slot is stuck past a timeout) and start
    #: as slots free, so a read is not cut to the slots just freed. 0: a read takes at most
    #: the free slots.
    read_ahead: int = 64
    #: Memory budget of the entries read ahead (bytes of envelopes): reads are sized from the
    #: last read's mean size, and one read ahead past it waits as ids only (ReadLoop.spill).
    max_read_ahead_bytes: int = 4 * 1024 * 1024
    #: How long one blocking read waits for new entries (ms).
    block_ms: int = 5_000
    #: An entry delivered more often than this goes to the dead letters.
    max_deliveries: int = 5
    #: How long shutdown waits for running handlers before handing their runs back (ms).
    shutdown_grace_ms: int = 10_000
    #: Default cap on attempts of a task that does not set its own.
    max_attempts: int = 3
    #: Longest backoff between attempts (ms).
    max_backoff_ms: int = 3_600_000


#: Old setting names kept working, with a DeprecationWarning: {class: {old: new}}.
RENAMED: dict[type, dict[str, str]] = {DispatcherSettings: {"held_poll_ms": "backlog_poll_ms"}}


def renamed(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the deprecated names of `cls`'s settings replaced by the new ones; giving
    both is a ConfigError."""
    for old, new in RENAMED.get(cls, {}).items():
        if old in values:
            if new in values:
                raise ConfigError(f"setting {old} is the deprecated name of {new}: give one")
            warnings.warn(f"setting {old} is deprecated: use {new}", DeprecationWarning, 3)
            values[new] = values.pop(old)
    return values


def _dispatcher_init(init: Callable[..., None]) -> Callable[..., None]:
    """DispatcherSettings(held_poll_ms=...) keeps working (the dataclass's own __init__ takes
    the new names only)."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **renamed(DispatcherSettings, kwargs))

    return __init__


DispatcherSettings.__init__ = _dispatcher_init(DispatcherSettings.__init__)  # type: ignore[method-assign]


def settings_from(cls: type[T], values: Mapping[str, Any]) -> T:
    """Build settings from a mapping; unknown names and bad values raise ConfigError."""
    values = renamed(cls, dict(values))
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown {cls.__name__} setting(s): {', '.join(unknown)}; "
            f"known: {', '.join(sorted(fields))}"
        )
    clean: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"setting {name} must be an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ConfigError(f"setting {name} must be a number, got {value!r}")
        if value < 0:
            raise ConfigError(f"setting {name} must not be negative, got {value!r}")
        clean[name] = int(value)
    return cls(**clean)


def from_env(cls: type[T], prefix: str, environ: Mapping[str, str] | None = None) -> T:
    """Read `PREFIX_NAME` variables (e.g. ZSCHED_WORKER_CONCURRENCY) into settings."""
    env = os.environ if environ is None else environ
    values = {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}
    return settings_from(cls, values)


def redis_url_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """ZSCHED_REDIS_URL, the one place a secret-bearing URL comes from besides the CLI."""
    env = os.environ if environ is None else environ
    return env.get("ZSCHED_REDIS_URL") or None


#: The event loops a process may ask for (zsched/eventloop.py): auto is uvloop when it imports.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def event_loop_from_env(environ: Mapping[str, str] | None = None) -> str:
    """ZSCHED_EVENT_LOOP: "auto" (the default), "uvloop" or "asyncio" (zsched/eventloop.py)."""
    env = os.environ if environ is None else environ
    choice = (env.get("ZSCHED_EVENT_LOOP") or "auto").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ConfigError(
            f"ZSCHED_EVENT_LOOP must be auto, uvloop or asyncio, got {env['ZSCHED_EVENT_LOOP']!r}"
        )
    return choice


def log_format_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """ZSCHED_LOG_FORMAT: "text" or "json" (zsched/observability/logs.py checks it)."""
    env = os.environ if environ is None else environ
    return env.get("ZSCHED_LOG_FORMAT") or None
