"""Limits per task, shared by every worker through Redis (lua/acquire.lua): a concurrency
semaphore (`max_concurrency=N`) and a token bucket (`rate="10/s"`, `burst=`), optionally one
per limit key (`limit_key=lambda payload: payload["tenant"]`).

Before a limited task's handler starts, the worker acquires a share; a run that gets none is
deferred back to the delayed set (retry.lua with the same envelope: no attempt used) for the
time the script says (the next token, or a short semaphore wait with jitter). The share of the
semaphore is the run's stream entry id, held until the handler ends (released at once), and
renewed with the worker's holds; a crashed worker's share ends with its hold (the visibility
timeout), and the run reclaimed under the same entry id takes the same share back. The
worker's side (admit, vacate, renew) is zsched/worker/admission.py; tasks without limits
never reach it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from zsched.errors import InvalidArgument, ScriptError
from zsched.protocol.keys import QueueKeys
from zsched.store.replies import now_arg as _now
from zsched.store.scripts import Call

#: How long a run waits when the task's semaphore is full (ms), before jitter: this times
#: the runs waiting per slot, at most MAX_DEFER_MS (acquire.lua).
DEFER_MS = 200
MAX_DEFER_MS = 30_000
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d*)\s*([a-z]+)\s*$")


def parse_rate(rate: str | float) -> float:
    """Tokens per second of "10/s", "600/m", "5/10s", "100/h" or a number (per second)."""
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        per_s = float(rate)
    elif isinstance(rate, str) and (m := _RATE.match(rate.lower())) and m[3] in _UNITS:
        per_s = float(m[1]) / (int(m[2] or 1) * _UNITS[m[3]])
    else:
        raise InvalidArgument(
            f"rate {rate!r} must be like '10/s', '600/m', '5/10s', '100/h' or a number", "rate"
        )
    if not (math.isfinite(per_s) and per_s > 0):
        raise InvalidArgument(f"rate {rate!r} must be above 0", "rate")
    return per_s


@dataclass(frozen=True)
class Limits:
    """A task's limits: at most `max_concurrency` running at once, at most `rate_per_s` starts
    a second with bursts of `burst`; per `limit_key(payload)` when given."""

    max_concurrency: int = 0
    rate_per_s: float = 0.0
    burst: int = 1
    limit_key: Any = None

    def key_for(self, payload: Any) -> str | None:
        if self.limit_key is None:
            return None
        return str(self.limit_key(payload))


def make_limits(task: str, max_concurrency: int | None, rate: str | float | None,
                burst: int | None, limit_key: Any) -> Limits | None:  # fmt: skip
    """The Limits of @app.task's options, checked; None without any limit."""
    if max_concurrency is None and rate is None:
        if burst is not None or limit_key is not None:
            raise InvalidArgument(f"task {task}: burst and limit_key need max_concurrency or rate",
                                  "burst" if burst is not None else "limit_key")  # fmt: skip
        return None
    whole = isinstance(max_concurrency, int) and not isinstance(max_concurrency, bool)
    if max_concurrency is not None and not (whole and max_concurrency >= 1):
        raise InvalidArgument(
            f"task {task}: max_concurrency must be a whole number >= 1", "max_concurrency"
        )
    per_s = parse_rate(rate) if rate is not None else 0.0
    if burst is not None and (rate is None or not isinstance(burst, int) or burst < 1):
        raise InvalidArgument(
            f"task {task}: burst must be a whole number >= 1, with a rate", "burst"
        )
    if limit_key is not None and not callable(limit_key):
        raise InvalidArgument(
            f"task {task}: limit_key must be a function of the payload", "limit_key"
        )
    return Limits(max_concurrency or 0, per_s, burst or 1, limit_key)


def limit_id(task: str, key: str | None) -> str:
    """The name of one limit in its keys: the task, or `<task>#<limit key>`."""
    return task if key is None else f"{task}#{key}"


@dataclass(frozen=True, slots=True)
class Admission:
    granted: bool
    wait_ms: int
    waiting: int


def acquire(k: QueueKeys, task: str, key: str | None, entry_id: str, run_id: str, limits: Limits,
            *, hold_ms: int, now_ms: int | None, renew: bool = False) -> Call[Admission]:  # fmt: skip
    """Take (or with renew=True, keep) a share of a task's limits for one run."""

    def decode(reply: Any) -> Admission:
        if not (isinstance(reply, list) and len(reply) == 3):
            raise ScriptError(f"acquire: expected {{granted, wait_ms, waiting}}, got {reply!r}")
        return Admission(int(reply[0]) == 1, int(reply[1]), int(reply[2]))

    rate = 0 if renew else limits.rate_per_s
    return Call(
        "acquire",
        [k.limit_holders(limit_id(task, key)), k.limit_bucket(limit_id(task, key)),
         k.limit_waiting(task)],
        [_now(now_ms), entry_id, run_id, limits.max_concurrency, hold_ms, repr(float(rate)),
         limits.burst, DEFER_MS, MAX_DEFER_MS],
        decode,
    )  # fmt: skip
