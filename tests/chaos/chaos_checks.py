"""Judge a chaos run: what must hold, and the accounting of extra executions.

Accounting (docs/reliability.md, "Accounting of extra executions"): an *entry* is one attempt
of one run on the ready stream, (run_id, attempt). Each delivery of an entry has a number
(1 for the XREADGROUP delivery, then +1 per reclaim) that the handler sees as
`current_run().deliveries`. Let S_e be the delivery numbers of entry e whose effect
transaction committed (its executions) and m_e the entry's last delivery, the one that acked
(its execution is in S_e: a worker acks only after its handler returned). Then:

    executions beyond the first   X = sum(|S_e| - 1)
    zsched's reclaimed counter    R = sum(m_e - 1)           (asserted: exact)
    deliveries that never ran     U = R - X = sum(m_e - |S_e|)  (reported)

U counts deliveries lost to a fault before their handler's effect: a worker killed holding
entries it had not run, a reply lost with a killed connection. No counter inside zsched can
count U (the process that knew is dead), so X is exact only as R - U; the checks assert R
exactly, that every extra execution is a different delivery of its entry (no run executed
twice under one delivery: no double dispatch), and that the sink's suppressed writes equal X.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from chaos_harness import Observed


@dataclass(frozen=True)
class Execution:
    run_id: str
    attempt: int
    deliveries: int
    pid: int
    start_ms: int
    scheduled_ms: int
    schedule_id: str


def parse_log(lines: list[str]) -> list[Execution]:
    out = []
    for line in lines:
        rid, attempt, deliveries, pid, start, sched, sid = line.rsplit("|", 6)
        out.append(
            Execution(rid, int(attempt), int(deliveries), int(pid), int(start), int(sched), sid)
        )
    return out


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def judge(obs: Observed) -> tuple[list[str], str]:
    """(failures, report table). No failures = every property held."""
    f: list[str] = []
    fin = obs.final
    if not fin:
        return ["redis-server was not running at the end: nothing to check"], ""
    if not obs.drained:
        f.append(f"the queue did not drain within {obs.cfg.drain_timeout_s:g}s")
    f += [f"zsched process crashed: {c}" for c in obs.crashes]
    f += [f"{slot} exited with {rc} on SIGTERM" for slot, rc in obs.exit_codes.items() if rc]
    f += [f"one place (snapshot): {v}" for v in obs.violations[:10]]
    f += [f"one place (final): {v}" for v in fin["violations"]]

    execs = parse_log(fin["log"])
    stats: dict[str, int] = fin["stats"]
    workload = set(obs.run_ids)
    rule_runs = {e.run_id for e in execs if e.schedule_id}
    by_run: dict[str, list[Execution]] = defaultdict(list)
    for e in execs:
        by_run[e.run_id].append(e)
    lost = _completeness(f, fin, by_run, workload, workload | rule_runs)
    extra, unexecuted = _accounting(f, execs, by_run, stats, len(workload))
    f += fin.get("rule_failures", [])
    f += _logged_once(obs)

    def first_lags(ids: set[str]) -> list[int]:
        return [min(e.start_ms for e in es) - es[0].scheduled_ms
                for r, es in by_run.items() if r in ids]  # fmt: skip

    lags, rlags = first_lags(workload), first_lags(rule_runs)
    n_runs = len(by_run)
    table = report(obs, stats, extra, unexecuted, lags, rlags, len(lost), n_runs, len(execs))
    return f, table


def _completeness(f: list[str], fin: dict[str, Any], by_run: dict[str, list[Execution]],
                  workload: set[str], known: set[str]) -> list[str]:  # fmt: skip
    """Every enqueued run executed at least once, and its effect happened exactly once; nothing
    is left anywhere. Failures go into `f`; returns the runs not done (lost)."""
    effects: dict[str, str] = fin["effects"]
    places = fin["places"]
    never = sorted(workload - set(by_run))
    if never:
        f.append(f"{len(never)} enqueued runs never executed, e.g. {never[:5]}")
    if set(effects) != set(by_run):
        f.append("effects and executions name different runs")
    strangers = sorted(set(by_run) - known)
    if strangers:
        f.append(f"executions of runs nobody enqueued: {strangers[:5]}")
    lost = sorted(known - set(places["done"]))
    if lost:
        f.append(f"{len(lost)} runs not done at the end (lost), e.g. {lost[:5]}")
    for place in ("delayed", "ready", "runs", "entries", "dead", "waiting"):
        if places[place]:
            f.append(f"{len(places[place])} run ids left in {place}, e.g. {places[place][:3]}")
    if fin["pending"]:
        f.append(f"{fin['pending']} entries still pending in the consumer group")
    return lost


def _logged_once(obs: Observed) -> list[str]:
    """A process logs a Redis outage once (one WARNING), not once per attempt: no process log
    has more "lost Redis" warnings than there were faults that cut or stalled Redis."""
    fl = obs.faults
    bound = fl["redis_kill"] + fl["redis_stop"] + fl["master_kill"] + fl["client_kill"]
    out = []
    for name, text in obs.logs.items():
        n = sum(1 for x in text.splitlines() if " WARNING " in x and "lost Redis" in x)
        if n > bound:
            out.append(f"{name}: {n} 'lost Redis' warnings for {bound} Redis faults "
                       f"(an outage must be logged once, not per attempt)")  # fmt: skip
    return out


def _accounting(f: list[str], execs: list[Execution], by_run: dict[str, list[Execution]],
                stats: dict[str, int], n_workload: int) -> tuple[int, int]:  # fmt: skip
    """Entries, deliveries, reclaims and the counters agree. Failures go into `f`; returns
    (executions beyond one per run, reclaims that were not executed again)."""
    by_entry: dict[tuple[str, int], list[int]] = defaultdict(list)
    for e in execs:
        by_entry[(e.run_id, e.attempt)].append(e.deliveries)
    twice = [k for k, ds in by_entry.items() if len(ds) != len(set(ds))]
    if twice:
        f.append(
            f"{len(twice)} entries executed twice under one delivery (double dispatch?), "
            f"e.g. {twice[:3]}"
        )
    extra = len(execs) - len(by_run)
    reclaim_expected = sum(max(ds) - 1 for ds in by_entry.values())
    unexecuted = stats.get("reclaimed", 0) - extra
    if stats.get("reclaimed", 0) != reclaim_expected:
        f.append(
            f"reclaimed counter {stats.get('reclaimed', 0)} != sum over entries of "
            f"(last delivery - 1) = {reclaim_expected}"
        )
    attempts = Counter(e.attempt for e in execs)
    if set(attempts) - {1} or stats.get("retried", 0) or stats.get("dead", 0):
        f.append(f"unexpected retries or dead letters: attempts {dict(attempts)}, stats {stats}")
    n_runs = len(by_run)
    for name, want in (("enqueued", n_workload), ("acked", n_runs), ("dispatched", n_runs)):
        if stats.get(name, 0) != want:
            f.append(f"stats {name} = {stats.get(name, 0)}, expected {want}")
    return extra, unexecuted


def report(
    obs: Observed,
    stats: dict[str, int],
    extra: int,
    unexecuted: int,
    lags: list[int],
    rlags: list[int],
    lost: int,
    n_runs: int,
    n_execs: int,
) -> str:
    fl = obs.faults
    rows: list[tuple[str, Any]] = [
        ("runs (enqueued + rule fires)", f"{len(obs.run_ids)} + {n_runs - len(obs.run_ids)}"),
        ("executions", n_execs),
        ("faults: SIGKILL dispatcher / worker", f"{fl['kill_dispatcher']} / {fl['kill_worker']}"),
        ("faults: zombie worker (SIGSTOP/CONT)", fl["stop"]),
        ("faults: redis-server SIGKILL + AOF", fl["redis_kill"]),
        ("faults: redis-server SIGSTOP (hung)", fl["redis_stop"]),
        ("faults: master SIGKILL (failover)", fl["master_kill"]),
        ("faults: SCRIPT FLUSH", fl["script_flush"]),
        ("faults: CLIENT KILL", f"{fl['client_kill']} ({fl['connections_killed']} connections)"),
        ("duplicates: extra executions (X)", extra),
        ("reclaimed (R, zsched counter)", stats.get("reclaimed", 0)),
        ("reclaimed deliveries never run (R-X)", unexecuted),
        ("fenced (ack/retry/renew refused)", stats.get("fenced", 0)),
        ("gone (outcome refused: no longer pending)", stats.get("gone", 0)),
        ("enqueue duplicates (retried enqueues)", stats.get("duplicate", 0)),
        (
            "rule fires / fire duplicates",
            f"{stats.get('fired', 0)} / {stats.get('fire_duplicate', 0)}",
        ),
        ("lost", lost),
        (
            "lag p50 / p99 / max (ms)",
            f"{pct(lags, 0.5):.0f} / {pct(lags, 0.99):.0f} / {max(lags, default=0)}",
        ),
        (
            "rule lag p50 / p99 / max (ms)",
            f"{pct(rlags, 0.5):.0f} / {pct(rlags, 0.99):.0f} / {max(rlags, default=0)}"
            if rlags
            else "no rules",
        ),
        ("snapshots checked (one place)", obs.snapshots),
        ("wall time (s)", f"{obs.seconds_total:.1f}"),
    ]
    w = max(len(k) for k, _ in rows)
    lines = [f"chaos result: seed={obs.cfg.seed}", *(f"  {k:<{w}}  {v}" for k, v in rows)]
    for ev in obs.final.get("latency", []):
        lines.append(f"  redis latency event (since the last restart) {ev}")
    for rr in obs.final.get("rule_rows", []):
        lines.append("  rule " + "  ".join(rr))
    return "\n".join(lines)
