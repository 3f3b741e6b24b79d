"""Waiting Redis out: one backoff and one way to log an outage, for every loop and call.

A failover, a restart or a hung server looks the same from a client: commands fail with one
of `connection.RETRYABLE_ERRORS` for a while, then work again. The dispatcher's loop, the
worker's loops, the CLI's start-up and the App's enqueue and rule operations all wait it out
here, with the same backoff (0.1 s doubling to 5 s), and log it the same way: one WARNING when
an outage starts, DEBUG lines for the attempts after it, one INFO line when it ends (a hung
Redis would otherwise write a line per attempt per loop of every process).

`ride_through` is the bounded form for calls made on behalf of an application: enqueue and
rule operations retry for `QueueSettings.outage_retry_ms` (docs/reliability.md), then raise
RedisUnavailable naming the queue and the time spent. It is safe because what it retries is
idempotent: enqueue by run id (fixed before the first attempt), rule edits by schedule id.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions

from zsched.errors import NotReplicated, RedisUnavailable, ScriptError
from zsched.store.connection import RETRYABLE_ERRORS, redact_text

T = TypeVar("T")
#: Redis answered but refused (maxmemory, a key of the wrong type, NOPERM, a script's error
#: reply): a loop logs an error and retries; exiting would not fix it, and it resumes once the
#: cause is fixed. What a loop waits out as an outage is `connection.RETRYABLE_ERRORS`.
REFUSALS: tuple[type[Exception], ...] = (redis.exceptions.ResponseError, ScriptError)
FIRST_S = 0.1
CAP_S = 5.0


class Backoff:
    """Exponential backoff: `FIRST_S` doubling to `CAP_S`; `reset()` after a success."""

    def __init__(self, first_s: float = FIRST_S, cap_s: float = CAP_S) -> None:
        self.first_s, self.cap_s = first_s, cap_s
        self.delay = first_s

    def next(self) -> float:
        """The sleep before the next attempt; the one after it is twice as long."""
        d = self.delay
        self.delay = min(self.delay * 2, self.cap_s)
        return d

    def reset(self) -> None:
        self.delay = self.first_s


class Outage:
    """Logs an outage once: WARNING at its first failure, DEBUG per further attempt, INFO when
    `ok()` is called after it (how long it lasted, how many attempts failed)."""

    def __init__(self, logger: logging.Logger, who: str, queue: str) -> None:
        self.log, self.who, self.queue = logger, who, queue
        self.since: float | None = None
        self.failures = 0

    def failed(self, exc: BaseException, retry_in_s: float) -> None:
        why = f"{type(exc).__name__}: {redact_text(str(exc))[:300]}"
        extra = {"queue": self.queue}
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning("%s lost Redis (%s); retrying in %.1fs with backoff (further "
                             "attempts are logged at DEBUG)", self.who, why, retry_in_s,
                             extra=extra)  # fmt: skip
        else:
            self.log.debug("%s: Redis still unreachable (%s); retrying in %.1fs", self.who,
                           why, retry_in_s, extra=extra)  # fmt: skip

    def ok(self) -> None:
        """Redis answered: end the outage, if there was one."""
        if self.since is None:
            return
        self.log.info("%s reached Redis again after %.1fs (%d failed attempts)", self.who,
                      time.monotonic() - self.since, self.failures,
                      extra={"queue": self.queue})  # fmt: skip
        self.since, self.failures = None, 0

    @property
    def down(self) -> bool:
        return self.since is not None


class PassFailures:
    """What a long-running loop (the dispatcher's, each of the worker's) does when a pass
    raises: an outage (RETRYABLE_ERRORS) goes to the shared `outage` log, a refusal (REFUSALS)
    is an ERROR line, anything else an ERROR with its traceback; each returns the backoff
    sleep before the next pass. `counter` counts the Redis errors (a metric child)."""

    def __init__(self, who: str, queue: str, logger: logging.Logger, counter: Any,
                 outage: Outage | None = None, crashed: str = "") -> None:  # fmt: skip
        self.who, self.queue, self.log, self.counter = who, queue, logger, counter
        self.outage = outage if outage is not None else Outage(logger, who, queue)
        #: The crash line, with %.1f for the delay (default: "<who> pass failed; retrying").
        self.crashed = crashed or f"{who} pass failed; retrying in %.1fs"
        self.backoff = Backoff()

    def ok(self) -> None:
        """A pass went through: the backoff starts over, an outage ends."""
        self.backoff.reset()
        self.outage.ok()

    def failed(self, exc: Exception) -> float:
        """Count and log `exc` (call it in the `except` block); the sleep before retrying."""
        delay = self.backoff.next()
        extra = {"queue": self.queue}
        if isinstance(exc, RETRYABLE_ERRORS):
            self.counter.inc()
            self.outage.failed(exc, delay)  # one WARNING per outage, not one per attempt
        elif isinstance(exc, REFUSALS):
            self.counter.inc()
            self.log.error("%s: Redis refused a command: %s; retrying in %.1fs", self.who,
                           redact_text(str(exc))[:500], delay, extra=extra)  # fmt: skip
        else:
            self.log.exception(self.crashed, delay, extra=extra)
        return delay


#: What `ride_through` retries: what the loops wait out, plus a durable write no replica
#: acknowledged yet (during a failover the new master has no replica for a moment).
RIDE_THROUGH_ERRORS: tuple[type[Exception], ...] = (*RETRYABLE_ERRORS, NotReplicated)


class _Ride:
    """The state of one call riding an outage out, shared by the sync and async drivers:
    attempts, backoff, the bound and the outage log. Made only after a first failure, so a
    call that works at once pays nothing for it."""

    def __init__(self, started: float, first: Exception, bound_ms: float, what: str,
                 queue: str, logger: logging.Logger, cap_s: float) -> None:  # fmt: skip
        self.started, self.last, self.bound_ms = started, first, bound_ms
        self.what, self.queue = what, queue
        self.backoff = Backoff(cap_s=cap_s)
        self.outage = Outage(logger, what, queue)
        self.attempt = 1

    def next_delay(self) -> float:
        """The sleep before the next attempt (which it counts); raises once the bound would
        be passed: RedisUnavailable (NotReplicated for a durable write) chained to the last."""
        elapsed = time.monotonic() - self.started
        delay = self.backoff.next()
        if (elapsed + delay) * 1000 > self.bound_ms:
            raise _gave_up(self.last, self.what, self.queue, elapsed, self.attempt) from self.last
        self.outage.failed(self.last, delay)
        self.attempt += 1
        return delay

    def done(self, out: T) -> T:
        self.outage.ok()
        return out


def ride_through(
    call: Callable[[int], T],
    *,
    bound_ms: float,
    what: str,
    queue: str,
    logger: logging.Logger,
    sleep: Callable[[float], Any] = time.sleep,
    errors: tuple[type[Exception], ...] = RIDE_THROUGH_ERRORS,
    cap_s: float = 1.0,
) -> T:
    """`call(attempt)` (attempt 1, 2, ...) until it returns, retrying `errors` with backoff
    (capped at `cap_s`: a caller is waiting, try often) while less than `bound_ms` has passed
    since the first attempt; then raise RedisUnavailable (NotReplicated for a durable write)
    naming `what`, the queue and the time spent, chained to the last error."""
    started = time.monotonic()
    try:  # the common case, without the state of a retry
        return call(1)
    except errors as exc:
        ride = _Ride(started, exc, bound_ms, what, queue, logger, cap_s)
    while True:
        sleep(ride.next_delay())
        try:
            return ride.done(call(ride.attempt))
        except errors as exc:
            ride.last = exc


def wait_out(call: Callable[[], T], *, what: str, logger: logging.Logger) -> T:
    """`call()` until Redis answers, however long that takes (a process at start-up): the
    loops' errors and backoff (up to CAP_S), one WARNING per outage."""
    return ride_through(lambda _: call(), bound_ms=math.inf, what=what, queue="",
                        logger=logger, errors=RETRYABLE_ERRORS, cap_s=CAP_S)  # fmt: skip


def _gave_up(exc: Exception, what: str, queue: str, elapsed: float, attempts: int) -> Exception:
    head = f"{what} in queue {queue!r} failed after {elapsed:.1f}s and {attempts} attempt(s)"
    if isinstance(exc, NotReplicated):
        return NotReplicated(f"{head}: {exc}")
    return RedisUnavailable(
        f"{head}: Redis unreachable ({type(exc).__name__}: {redact_text(str(exc))[:300]}). "
        f"Retrying with the same run ids is safe (duplicates are detected); "
        f"QueueSettings.outage_retry_ms sets how long to wait"
    )


async def ride_through_async(
    call: Callable[[int], Awaitable[T]],
    *,
    bound_ms: int,
    what: str,
    queue: str,
    logger: logging.Logger,
) -> T:
    """ride_through for a coroutine (AsyncApp): `await call(attempt)`, the same retries,
    backoff, bound, logging and errors; the waits are `asyncio.sleep`, so the loop runs on."""
    started = time.monotonic()
    try:
        return await call(1)
    except RIDE_THROUGH_ERRORS as exc:
        ride = _Ride(started, exc, bound_ms, what, queue, logger, 1.0)
    while True:
        await asyncio.sleep(ride.next_delay())
        try:
            return ride.done(await call(ride.attempt))
        except RIDE_THROUGH_ERRORS as exc:
            ride.last = exc
