"""The counts the Lua scripts keep in each queue partition's `stats` hash, as Prometheus counters.

Every script counts what it did, in the same call that did it, in the partition's `stats`
hash (keys.py). The collector (zsched/observability/collector.py) reads that hash at every scrape and turns
it into the counters below, labelled `queue` and `partition` ("" for a queue that is not
partitioned). Every zsched process serves them, and every one serves the same numbers: they
are the queue's own counts, not the process's, so aggregate them with `max` (or scrape one
process), never `sum` (docs/operations.md, "Which series to sum").

================================== ================================ ===========================
counter                            stats field(s)                   extra labels
================================== ================================ ===========================
zsched_queue_runs_enqueued_total   enqueued                         (enqueue.lua)
zsched_queue_duplicates_total      duplicate:live, duplicate:done,  kind, schedule
                                   ledger:duplicate::<rule>,
                                   duplicate:backfill:<rule>
zsched_queue_runs_dispatched_total dispatched                       (dispatch.lua)
zsched_queue_runs_acked_total      acked                            (ack.lua)
zsched_queue_runs_retried_total    retried                          (retry.lua)
zsched_queue_runs_dead_lettered... dead:<reason>                    reason (dead, reclaim.lua)
zsched_queue_fenced_total          fenced                           (ack, retry, dead, renew)
zsched_queue_runs_reclaimed_total  reclaimed                        (reclaim.lua)
zsched_queue_rule_outcomes_total   ledger:<outcome>:<reason>:<rule> schedule, outcome, reason
================================== ================================ ===========================

Labels stay bounded: a rule id appears only on rule outcomes and rule duplicates (kind
rule_fire, backfill), a reason is a word the code chooses (lua/dead.lua's kinds; the first
word of a skipped slot's reason), never a run id or an error message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily

_PLAIN = {
    "enqueued": "zsched_queue_runs_enqueued",
    "dispatched": "zsched_queue_runs_dispatched",
    "acked": "zsched_queue_runs_acked",
    "retried": "zsched_queue_runs_retried",
    "fenced": "zsched_queue_fenced",
    "reclaimed": "zsched_queue_runs_reclaimed",
}
_HELP = {
    "zsched_queue_runs_enqueued": "Runs accepted by enqueue or backfill (duplicates excluded), "
    "counted in Redis: the queue's total.",
    "zsched_queue_duplicates": "Duplicate runs caught, by kind: live (enqueue of a live run id), "
    "done (done within the dedupe window), rule_fire, backfill; counted in Redis.",
    "zsched_queue_runs_dispatched": "Runs moved onto the ready stream, counted in Redis.",
    "zsched_queue_runs_acked": "Runs acknowledged as done, counted in Redis.",
    "zsched_queue_runs_retried": "Runs put back for another attempt, counted in Redis.",
    "zsched_queue_runs_dead_lettered": "Runs sent to the dead-letter stream, by reason, counted "
    "in Redis.",
    "zsched_queue_fenced": "Acks, retries, dead letters or renewals refused because the caller "
    "no longer owned the entry, counted in Redis.",
    "zsched_queue_runs_reclaimed": "Pending entries taken over from a silent consumer, counted "
    "in Redis.",
    "zsched_queue_rule_outcomes": "Ledger outcomes of recurring rules' slots (ran, ran_late, "
    "coalesced, skipped by reason, duplicate, backfilled ...), counted in Redis.",
}
_LABELS = {
    "zsched_queue_duplicates": ["kind", "schedule"],
    "zsched_queue_runs_dead_lettered": ["reason"],
    "zsched_queue_rule_outcomes": ["schedule", "outcome", "reason"],
}

#: Sample names of the counters (the PromQL name test reads them).
COLLECTED_COUNTERS: tuple[str, ...] = tuple(f"{name}_total" for name in _HELP)

#: Duplicate kinds that always have a series (0 until one is caught).
_QUEUE_KINDS = ("live", "done")
#: Per-rule fields (the rule id follows) that have a series from the rule's creation.
_RULE_ZEROS = ("duplicate:backfill:", "ledger:duplicate::", "ledger:skipped:grace_passed:",
               "ledger:skipped:catch_up_cap:", "ledger:skipped:overlap:")  # fmt: skip
#: Dead-letter reasons that always have a series, so that increase() sees the first one
#: (a series that appears at 1 shows no increase). `other` appears when it happens.
_DEAD_REASONS = ("exhausted", "failed", "unknown_task", "undecodable", "worker_error",
                 "max_deliveries")  # fmt: skip


def families() -> dict[str, CounterMetricFamily]:
    """Empty counter families, one per name."""
    return {
        name: CounterMetricFamily(name, text, labels=["queue", "partition", *_LABELS.get(name, [])])
        for name, text in _HELP.items()
    }


def decode(raw: Mapping[Any, Any], rules: Iterable[str] = ()) -> dict[str, int]:
    """A `stats` hash as read (bytes) -> {field: count}; fields that are not integers are left
    out. Each of `rules` (the partition's rules) gets its duplicate and skipped-slot counts
    at 0 until they happen, so that increase() and the rule alerts see the first one."""
    out: dict[str, int] = {}
    for rule in rules:
        for field in _RULE_ZEROS:
            out[field + rule] = 0
    for k, v in raw.items():
        field = k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)
        try:
            out[field] = int(v)
        except (TypeError, ValueError):
            continue
    return out


def add(fams: Mapping[str, CounterMetricFamily], queue: str, partition: str,
        stats: Mapping[str, int]) -> None:  # fmt: skip
    """Add one partition's counts to `fams`."""
    base = [queue, partition]
    for field, name in _PLAIN.items():
        fams[name].add_metric(base, stats.get(field, 0))
    for kind in _QUEUE_KINDS:
        fams["zsched_queue_duplicates"].add_metric(
            [*base, kind, ""], stats.get(f"duplicate:{kind}", 0)
        )
    dead = fams["zsched_queue_runs_dead_lettered"]
    for reason in _DEAD_REASONS:
        dead.add_metric([*base, reason], stats.get(f"dead:{reason}", 0))
    for field, n in sorted(stats.items()):
        if not (field.startswith("dead:") and field[5:] in _DEAD_REASONS):
            _add_keyed(fams, base, field, n)


def _add_keyed(
    fams: Mapping[str, CounterMetricFamily], base: list[str], field: str, n: int
) -> None:
    """A field with labels in its name: dead:<reason>, duplicate:backfill:<rule>, ledger:..."""
    if field.startswith("dead:"):
        fams["zsched_queue_runs_dead_lettered"].add_metric([*base, field[5:]], n)
    elif field.startswith("duplicate:backfill:"):
        fams["zsched_queue_duplicates"].add_metric([*base, "backfill", field[19:]], n)
    elif field.startswith("ledger:"):
        parts = field.split(":", 3)  # the rule id comes last: it may hold a colon
        if len(parts) != 4:
            return
        _, outcome, reason, rule = parts
        fams["zsched_queue_rule_outcomes"].add_metric([*base, rule, outcome, reason], n)
        if outcome == "duplicate":
            fams["zsched_queue_duplicates"].add_metric([*base, "rule_fire", rule], n)
