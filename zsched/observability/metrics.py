"""Every Prometheus metric of zsched, built on an injectable registry.

Names start with `zsched_`, use base units, and only counters end in `_total`. Labels come from
a fixed set (queue, task, schedule, outcome, reason, policy, where, role) and never a run id.
Queue gauges (backlog, pending, ...) are read from Redis at scrape time by a collector
(see zsched/observability/collector.py), not kept here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Lag buckets from 1 ms to 1 h.
LAG_BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip


def observe_many(child: Any, amounts: Sequence[float]) -> None:
    """Observe `amounts` on a labelled Histogram child: one increment per bucket touched.

    prometheus_client has no batch observe, and observe() costs ~3-8 us (a linear bucket
    search, a lock per increment): at 500 runs per dispatch call that was most of the
    dispatcher's own time. This reads the child's bounds and values (prometheus_client's
    layout, checked by tests/unit/observability/test_metrics_batch.py) and falls back to observe() on
    any other layout. Observing a batch this way gives the very samples one observe() per
    amount would.
    """
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if not amounts:
        return
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for a in amounts:
            child.observe(a)
        return
    counts = [0] * len(bounds)
    for a in amounts:
        counts[bisect_left(bounds, a)] += 1  # the first bound >= a: observe()'s bucket
    total.inc(sum(amounts))
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


@dataclass(slots=True)
class TaskMetrics:
    """A worker's labelled metric children of one task, and the start lags and durations not yet observed.

    Histograms are observed in batches (observe_many, when outcomes are written, at each read
    and hold renewal): one observe() per run cost ~3-8 us twice per run, a tenth of a no-op
    run's worker time. Successes are counted the same way."""

    succeeded: Any
    start_lag: Any
    duration: Any
    lags: list[float] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    #: Runs succeeded and not counted yet: one inc() (a lock) per batch, not per run.
    ok: int = 0

    def observe(self) -> None:
        if self.ok:
            self.succeeded.inc(self.ok)
            self.ok = 0
        if self.lags:
            observe_many(self.start_lag, self.lags)
            self.lags.clear()
        if self.durations:
            observe_many(self.duration, self.durations)
            self.durations.clear()


class Metrics:
    """The metrics of one process. Pass a registry to isolate (tests, several apps)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.dispatch_lag = Histogram(
            "zsched_dispatch_lag_seconds",
            "Delay from a run's intended time to its dispatch onto the ready stream.",
            ["queue"], buckets=LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.start_lag = Histogram(
            "zsched_start_lag_seconds",
            "Delay from a run's intended time to its handler's start.",
            ["queue", "task"], buckets=LAG_BUCKETS, registry=r,
        )  # fmt: skip
        self.run_duration = Histogram(
            "zsched_run_duration_seconds",
            "Time a handler ran, by task.",
            ["queue", "task"], buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.enqueued = Counter(
            "zsched_runs_enqueued_total", "Runs accepted by enqueue (duplicates excluded).",
            ["queue"], registry=r,
        )  # fmt: skip
        self.dispatched = Counter(
            "zsched_runs_dispatched_total", "Runs moved from the delayed set to the ready stream.",
            ["queue"], registry=r,
        )  # fmt: skip
        self.completed = Counter(
            "zsched_runs_completed_total",
            "Handler outcomes: succeeded, failed, retried, dead.",
            ["queue", "task", "outcome"], registry=r,
        )  # fmt: skip
        self.retried = Counter(
            "zsched_runs_retried_total", "Runs put back in the delayed set for another attempt.",
            ["queue", "task"], registry=r,
        )  # fmt: skip
        self.dead_lettered = Counter(
            "zsched_runs_dead_lettered_total", "Runs sent to the dead-letter stream, by reason.",
            ["queue", "reason"], registry=r,
        )  # fmt: skip
        self.reclaimed = Counter(
            "zsched_runs_reclaimed_total",
            "Pending entries taken over from a consumer that stopped acknowledging.",
            ["queue"], registry=r,
        )  # fmt: skip
        self.fenced = Counter(
            "zsched_fenced_total",
            "Acks, retries, dead letters, hand-backs or hold renewals refused: this consumer "
            "no longer owned the run.",
            ["queue", "reason"], registry=r,
        )  # fmt: skip
        self.resent_written = Counter(
            "zsched_resent_written_total",
            "Outcomes sent again after a failed call and found written already: most likely by "
            "that call, whose reply was lost (not counted as fenced).",
            ["queue", "reason"], registry=r,
        )  # fmt: skip
        self.duplicates = Counter(
            "zsched_duplicates_total",
            "Duplicate runs caught, by where: enqueue, fire, worker, timeout.",
            ["queue", "where"], registry=r,
        )  # fmt: skip
        self.replaced = Counter(
            "zsched_runs_replaced_total",
            "Waiting runs given a new payload and due by enqueue, by outcome: replaced, debounced.",
            ["queue", "outcome"], registry=r,
        )  # fmt: skip
        self.limit_deferred = Counter(
            "zsched_limit_deferred_total",
            "Runs deferred because their task's concurrency or rate limit was reached.",
            ["queue", "task"], registry=r,
        )  # fmt: skip
        self.limit_waiting = Gauge(
            "zsched_limit_waiting_runs",
            "Runs of a task deferred by its limits and not started since (the queue's count, "
            "as this worker last read it: take max across workers).",
            ["queue", "task"], registry=r,
        )  # fmt: skip
        self.missed_slots = Counter(
            "zsched_missed_slots_total",
            "Rule slots not run on time, by misfire policy.",
            ["queue", "schedule", "policy"], registry=r,
        )  # fmt: skip
        self.overlap_skips = Counter(
            "zsched_overlap_skips_total",
            "Fires skipped because the rule's previous run was still running.",
            ["queue", "schedule"], registry=r,
        )  # fmt: skip
        self.fires = Counter(
            "zsched_rule_fires_total", "Runs materialised from recurring rules.",
            ["queue", "schedule"], registry=r,
        )  # fmt: skip
        self.unaccounted_slots = Gauge(
            "zsched_rule_unaccounted_slots",
            "Slots past their misfire grace that have no recorded outcome (the ledger audit).",
            ["queue", "schedule"], registry=r,
        )  # fmt: skip
        self.unreadable_rules = Gauge(
            "zsched_rule_unreadable",
            "1 while this dispatcher cannot read the rule's stored spec (corrupt, or written "
            "by a newer zsched): it does not fire until rewritten.",
            ["queue", "schedule"], registry=r,
        )  # fmt: skip
        self.wakeups = Counter(
            "zsched_dispatcher_wakeups_total",
            "Messages a dispatcher heard on the queue's wake channel (a sooner run, a rule "
            "written, a lease freed), each ending its sleep before its timer.",
            ["queue"], registry=r,
        )  # fmt: skip
        self.heartbeat = Gauge(
            "zsched_process_heartbeat_timestamp_seconds",
            "Unix time of the last loop pass of this dispatcher or worker process.",
            ["queue", "role"], registry=r,
        )  # fmt: skip
        self.stuck_handlers = Gauge(
            "zsched_worker_stuck_handlers",
            "Sync handlers still running past their timeout: threads (and run slots) lost.",
            ["queue"], registry=r,
        )  # fmt: skip
        self.stuck_handbacks = Counter(
            "zsched_worker_stuck_handbacks_total",
            "Runs read ahead that a worker handed back (due now, same attempt) for other "
            "workers because every one of its slots was held by a stuck sync handler.",
            ["queue"], registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "zsched_worker_in_flight_runs", "Runs this worker holds (running or buffered).",
            ["queue"], registry=r,
        )  # fmt: skip
        self.redis_errors = Counter(
            "zsched_redis_errors_total", "Redis connection errors seen by a loop, by role.",
            ["queue", "role"], registry=r,
        )  # fmt: skip
        self.eviction_risk = Gauge(
            "zsched_redis_eviction_risk",
            "1 while Redis's maxmemory-policy may evict zsched's keys (the process was started "
            "with --allow-eviction, or the policy changed after start), else 0.",
            ["queue", "role"], registry=r,
        )  # fmt: skip
