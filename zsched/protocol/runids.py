"""Fresh run ids: 20 URL-safe characters that sort by creation time (docs/protocol.md).

The Node.js and shell clients make the same ids (examples/); any non-empty UTF-8 string of
at most 512 bytes is a valid run id too, so these are a choice, not a rule of the protocol.
"""

from __future__ import annotations

import base64
import os
import threading
import time

#: URL-safe characters in ASCII order, so that a number written with them sorts as it counts.
ORDERED_ALPHABET = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_TO_ORDERED = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", ORDERED_ALPHABET
)


def _ordered(n: int, nbytes: int) -> str:
    """`n` big-endian in `nbytes` bytes, in base 64 with ORDERED_ALPHABET (4 chars per 3 bytes)."""
    return base64.urlsafe_b64encode(n.to_bytes(nbytes, "big")).decode().translate(_TO_ORDERED)


def new_run_id(ms: int, n: int) -> str:
    """The run id of epoch ms `ms` and 72-bit number `n`: 8 + 12 characters that sort as
    (ms, n) does."""
    return _ordered(ms, 6) + _ordered(n, 9)


class _RunIds:
    """Run ids that sort by creation time, like a monotonic ULID in 20 URL-safe characters:
    8 of the epoch ms (48 bits), 12 of a 72-bit number that starts at random (os.urandom)
    each millisecond and counts up within it. Ids of one process always increase (a clock
    that steps back keeps the last millisecond); two processes collide only if they start
    within a few ids of each other in the same millisecond (~2^-70). 20 characters fit the
    same Redis string class (a 24-byte sds) as the former 16 random ones.

    Why ordered: runs due at the same instant sit in `delayed` ordered by id, so they are
    dispatched in the order they were enqueued, and each new one goes to the end of that run
    instead of a random place in the skiplist; with 1M runs due at once that made enqueue
    faster and dispatch cost ~38 % less Redis time (BENCHMARKS.md). A forked child starts a
    fresh number, so parent and child never hand out the same ids."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._high = 0  # the number without its last 6 bits
        self._low = 0  # its last 6 bits: the id's last character
        self._head = ""  # the id's first 19 characters

    def _start(self, n: int) -> None:
        self._high, self._low = n & ~63, n & 63
        self._head = new_run_id(self._ms, self._high)[:19]

    def next(self) -> str:
        ms = int(time.time() * 1000)
        with self._lock:
            if ms > self._ms:
                # A random start in the lower half leaves 2^71 ids of room in the millisecond.
                self._ms = ms
                self._start(int.from_bytes(os.urandom(9), "big") >> 1)
            elif self._low < 63:  # the common case within a millisecond: one more character
                self._low += 1
            else:
                self._start(self._high + 64)
            return self._head + ORDERED_ALPHABET[self._low]


_run_ids = _RunIds()
#: A fresh run id of this process (see _RunIds).
fresh_run_id = _run_ids.next


def created_ms(run_id: str) -> int:
    """The epoch ms written in the first 8 characters of a fresh run id."""
    ms = 0
    for c in run_id[:8]:
        ms = ms * 64 + ORDERED_ALPHABET.index(c)
    return ms


def rule_of(run_id: str) -> str | None:
    """The schedule id a run id may be a fire of (`<schedule_id>@<slot>`, `...@manual:...`:
    the part before its last `@`), or None. A guess is harmless: the lease scripts free a
    lease only for the run it names."""
    head, sep, _ = run_id.rpartition("@")
    return head if sep and head else None
