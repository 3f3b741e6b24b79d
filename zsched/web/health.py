"""The overview's judgement: rates from the scripts' counters and a plain verdict.

Rates come from the `stats` hash the scripts keep in Redis (dispatched, acked, dead, ...):
the console samples it at each overview read and divides the growth by the time between
samples, so every console process sees the same counters and no process has to be up for the
rates to be right. The verdict names every cause it finds, worst first.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: Counters of the `stats` hash shown as rates per minute (names as the scripts write them).
RATE_COUNTERS = ("enqueued", "dispatched", "acked", "retried", "dead", "fired")
#: Samples kept per queue partition, and the longest window a rate looks back over.
SAMPLES = 240
RATE_WINDOW_MS = 5 * 60_000


@dataclass(frozen=True)
class Thresholds:
    """When the verdict speaks up; each field is one cause."""

    #: The oldest due run has waited this long for a dispatcher.
    lag_ms: int = 30_000
    #: A run has been delivered and not acknowledged for this long (a stuck handler).
    pending_idle_ms: int = 300_000
    #: A worker of the group has not read for this long.
    stale_worker_ms: int = 60_000
    #: A rule's next fire is this far in the past.
    late_rule_ms: int = 60_000
    #: A dispatcher's heartbeat (every 5 s while busy, 30 s while idle) is this old.
    stale_dispatcher_ms: int = 60_000


@dataclass
class Sampler:
    """Recent `stats` readings per queue partition, for rates; thread-safe."""

    samples: dict[str, deque[tuple[int, dict[str, int], int]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, now_ms: int, stats: dict[str, int], due: int) -> None:
        with self.lock:
            q = self.samples.setdefault(name, deque(maxlen=SAMPLES))
            if not q or now_ms > q[-1][0]:
                q.append((now_ms, dict(stats), due))

    def rates(self, name: str) -> dict[str, float | None]:
        """Per-minute growth of each RATE_COUNTER over the last RATE_WINDOW_MS (None: one
        sample only, so far)."""
        with self.lock:
            q = list(self.samples.get(name, ()))
        if len(q) < 2:
            return {c: None for c in RATE_COUNTERS}
        last = q[-1]
        first = next(s for s in q if last[0] - s[0] <= RATE_WINDOW_MS)
        if first is last:
            first = q[-2]
        minutes = (last[0] - first[0]) / 60_000
        return {c: max(0, last[1].get(c, 0) - first[1].get(c, 0)) / minutes for c in RATE_COUNTERS}

    def backlog_growing(self, name: str, rounds: int = 3) -> bool:
        """True when the due backlog grew at each of the last `rounds` samples."""
        with self.lock:
            q = list(self.samples.get(name, ()))[-(rounds + 1) :]
        return len(q) == rounds + 1 and all(b[2] > a[2] for a, b in zip(q, q[1:], strict=False))

    def new_dead(self, name: str) -> int:
        """Dead letters added in the rate window (the `dead` counter's growth)."""
        with self.lock:
            q = list(self.samples.get(name, ()))
        if len(q) < 2:
            return 0
        last = q[-1]
        first = next(s for s in q if last[0] - s[0] <= RATE_WINDOW_MS)
        return max(0, last[1].get("dead", 0) - first[1].get("dead", 0))


def _secs(ms: int) -> str:
    return f"{ms / 1000:.0f}s" if ms < 120_000 else f"{ms / 60_000:.0f}min"


def _stale_processes(part: dict[str, Any], t: Thresholds) -> list[str]:
    """Workers that stopped reading and dispatchers whose heartbeat is old."""
    out: list[str] = []
    for c in part["consumers"]:
        if c["idle_ms"] > t.stale_worker_ms:
            out.append(f"worker {c['name']} has not read for {_secs(c['idle_ms'])} "
                       f"(stale heartbeat)")  # fmt: skip
    for d in part.get("dispatchers", []):
        if d["age_ms"] > t.stale_dispatcher_ms:
            out.append(f"dispatcher {d['name']} has not beaten for {_secs(d['age_ms'])} "
                       f"(stale heartbeat: stopped without a goodbye, or stuck)")  # fmt: skip
    return out


def causes(part: dict[str, Any], t: Thresholds) -> list[str]:
    """Every reason one queue partition needs attention, worst first (empty = healthy).
    `part` is what the backend's overview reads for it."""
    out: list[str] = []
    if part["oldest_due_age_ms"] > t.lag_ms:
        waits = f"the queue is {part['paused']}" if part.get("paused") else "for a dispatcher"
        out.append(f"due runs wait {waits}: the oldest was due "
                   f"{_secs(part['oldest_due_age_ms'])} ago")  # fmt: skip
    if part["backlog_growing"]:
        out.append(f"the due backlog is growing ({part['due']} runs)")
    if part["oldest_pending_idle_ms"] > t.pending_idle_ms:
        out.append(f"a run has been running unacknowledged for "
                   f"{_secs(part['oldest_pending_idle_ms'])}")  # fmt: skip
    if part["new_dead"]:
        out.append(f"{part['new_dead']} new dead letter(s) in the last "
                   f"{RATE_WINDOW_MS // 60_000} minutes")  # fmt: skip
    out += _stale_processes(part, t)
    for u in part.get("unreadable", [])[:5]:
        out.append(f"rule {u['schedule_id']} cannot be read, so it does not fire until it is "
                   f"rewritten or removed: {u['reason']}")  # fmt: skip
    for sid, n in sorted(part.get("unaccounted", {}).items())[:5]:
        out.append(f"rule {sid} has {n} slot(s) past their grace with no outcome (audit)")
    late = part.get("late_rule")
    if late:
        out.append(f"rule {late['schedule_id']} is late: its fire was due "
                   f"{_secs(late['late_ms'])} ago")  # fmt: skip
    return out


def verdict(all_causes: list[str]) -> str:
    """'healthy', or 'needs attention: ' and the causes."""
    return "healthy" if not all_causes else "needs attention: " + "; ".join(all_causes)
