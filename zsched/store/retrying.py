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
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from zsched.errors import NotReplicated, RedisUnavailable
from zsched.store.connection import RETRYABLE_ERRORS, redact_text

T = TypeVar("T")
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


#: What `ride_through` retries: what the loops wait out, plus a durable write no replica
#: acknowledged yet (during a failover the new master has no replica for a moment).
RIDE_THROUGH_ERRORS: tuple[type[Exception], ...] = (*RETRYABLE_ERRORS, NotReplicated)


def ride_through(
    call: Callable[[int], T],
    *,
    bound_ms: int,
    what: str,
    queue: str,
    logger: logging.Logger,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """`call(attempt)` (attempt 1, 2, ...) until it returns, retrying RIDE_THROUGH_ERRORS with
    backoff while less than `bound_ms` has passed since the first attempt; then raise
    RedisUnavailable (NotReplicated for a durable write) naming `what`, the queue and the
    time spent, chained to the last error."""
    started = time.monotonic()
    try:  # the common case, without the state of a retry
        return call(1)
    except RIDE_THROUGH_ERRORS as exc:
        first = exc
    backoff = Backoff(cap_s=1.0)  # a caller is waiting: try often
    outage = Outage(logger, what, queue)
    attempt, last = 1, first
    while True:
        elapsed = time.monotonic() - started
        delay = backoff.next()
        if (elapsed + delay) * 1000 > bound_ms:
            raise _gave_up(last, what, queue, elapsed, attempt) from last
        outage.failed(last, delay)
        sleep(delay)
        attempt += 1
        try:
            out = call(attempt)
        except RIDE_THROUGH_ERRORS as exc:
            last = exc
        else:
            outage.ok()
            return out


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
        first = exc
    backoff = Backoff(cap_s=1.0)
    outage = Outage(logger, what, queue)
    attempt, last = 1, first
    while True:
        elapsed = time.monotonic() - started
        delay = backoff.next()
        if (elapsed + delay) * 1000 > bound_ms:
            raise _gave_up(last, what, queue, elapsed, attempt) from last
        outage.failed(last, delay)
        await asyncio.sleep(delay)
        attempt += 1
        try:
            out = await call(attempt)
        except RIDE_THROUGH_ERRORS as exc:
            last = exc
        else:
            outage.ok()
            return out
