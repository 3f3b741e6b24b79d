"""Scaling on Redis Cluster: end-to-end throughput of one partitioned queue on 1, 2 and 3
masters (`make bench-scaling`, or `python -m bench.scaling`).

For each master count a fresh cluster (no replicas) starts on loopback; `n` runs are enqueued
into a queue of `partitions` partitions (the same queue layout for every master count, so only
the number of shards changes), then one `zsched dispatcher` and `workers` `zsched worker`
processes start and the clock runs until every run is acked. Also recorded: the enqueue rate
and how the Redis commands (those inside scripts included: INFO commandstats), the
requests (total_commands_processed) and Redis's CPU spread over the masters. Results go to
bench-results/scaling-<time>.json.

Read the figures with the machine in mind: every Redis server and every zsched process share
the same few cores, so adding masters adds no CPU; what this shows is that the load spreads
over the masters and the per-shard work shrinks, not the speed-up of a real multi-host cluster.

`--cap PCT` makes Redis the bottleneck, as it is in production where the clients scale out
across hosts: each master runs in a cgroup of its own capped at PCT % of one core
(bench/cgroup.py; needs root), so N masters have N times the Redis CPU while the clients
stay far from their own limit (their CPU is recorded: `client_cpu_percent`). `--place` first
moves slots so each master holds an even share of the partitions (zsched/store/placement.py). What
this cannot simulate: network latency and bandwidth between hosts (everything is loopback),
and a client side that has cores of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

import zsched
from zsched.observability.metrics import Metrics
from zsched.store.placement import balance

from .cgroup import CpuCap
from .common import cpu_seconds, tree_pids

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cluster_harness import Cluster  # noqa: E402

# The App the worker processes load (`bench.scaling:app`); the CLI points it at --redis/--queue.
app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"),
                 queue=os.environ.get("ZSCHED_QUEUE", "scaling"), metrics=Metrics())  # fmt: skip


@app.task(name="noop")
async def noop(payload: object) -> None:
    """The handler: nothing, so the figures measure zsched and Redis."""


def _proc(*args: str, url: str, favour: bool = False) -> subprocess.Popen[bytes]:
    """A zsched process; `favour`: at nice -10 (every thread it starts inherits it), so that
    on this shared host the other tenants' load, not the capped masters, cannot set the pace."""
    env = {**os.environ, "ZSCHED_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    nice = ["nice", "-n", "-10"] if favour else []
    return subprocess.Popen([*nice, sys.executable, "-m", "zsched", *args, "--redis", url],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip


def _acked(a: zsched.App) -> int:
    return sum(int(a.redis.hget(v.keys.stats, "acked") or 0) for v in a.partition_views())


def _blocked_readers(c: Cluster) -> int:
    """Clients blocked in a read on the masters: a started worker blocks in one XREADGROUP per
    partition while the streams are empty (Redis 7.0 adds the consumer to the group only once
    a read returns an entry, so XINFO CONSUMERS cannot tell)."""
    total = 0
    for port in c.master_ports():
        r = redis.Redis(port=port)
        try:
            total += int(r.info("clients")["blocked_clients"])
        finally:
            r.close()
    return total


def _ack_times_s(a: zsched.App) -> list[float]:
    """Every run's ack time (s), by the server's clock: the completion records' scores (`done`,
    done_at_ms), not the polling loop, which sees an ack only once a round trip to every
    partition's (capped, busy) master has come back."""
    return sorted(score / 1000 for v in a.partition_views()
                  for _, score in a.redis.zrange(v.keys.done, 0, -1, withscores=True))  # fmt: skip


def _load(c: Cluster) -> dict[int, tuple[int, float, int]]:
    """port -> (commands run, those inside scripts included; CPU seconds used; requests from
    clients) of each master."""
    out = {}
    for port in c.master_ports():
        r = redis.Redis(port=port)
        try:
            cpu = r.info("cpu")
            calls = sum(int(v["calls"]) for v in r.info("commandstats").values())
            out[port] = (calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
                         int(r.info("stats")["total_commands_processed"]))  # fmt: skip
        finally:
            r.close()
    return out


def _cap(c: Cluster, percent: float | None) -> list[CpuCap]:
    caps = []
    for node in c.nodes:
        if percent and node.server is not None and node.server.proc is not None:
            pid = node.server.proc.pid
            os.setpriority(os.PRIO_PROCESS, pid, -10)  # the cap, not other tenants, limits it
            caps.append(CpuCap(f"zsched-bench-{node.port}", pid, percent))
    return caps


def one(masters: int, n: int, partitions: int, workers: int, concurrency: int,
        timeout: float = 300.0, cap: float | None = None,
        place: bool = False) -> dict[str, Any]:  # fmt: skip
    """Throughput of one cluster size."""
    with Cluster(masters=masters, replicas=0) as c:
        caps = _cap(c, cap)
        try:
            return _measure(c, masters, n, partitions, workers, concurrency, timeout, cap, place)
        finally:
            for cg in caps:
                cg.remove()


def _measure(c: Cluster, masters: int, n: int, partitions: int, workers: int, concurrency: int,
             timeout: float, cap: float | None, place: bool) -> dict[str, Any]:  # fmt: skip
    q = "s" + uuid.uuid4().hex[:8]
    moves = len(balance(c.url, q, partitions, apply=True)) if place else 0
    a = zsched.App(c.url, queue=q, partitions=partitions, metrics=Metrics())
    items = [{"task": "noop", "run_id": f"r{i}", "payload": {"i": i}} for i in range(n)]
    t0 = time.perf_counter()
    for i in range(0, n, 10_000):
        a.enqueue_many(items[i : i + 10_000])
    enqueue_s = time.perf_counter() - t0
    before, t_before = _load(c), time.perf_counter()
    fav = cap is not None  # capped masters run at nice -10; their clients do too
    procs = [_proc("worker", "bench.scaling:app", "--queue", q,
                   "--concurrency", str(concurrency), url=c.url, favour=fav)
             for _ in range(workers)]  # fmt: skip
    try:
        deadline = time.perf_counter() + timeout
        # The workers first, reading every partition, then the dispatcher: started together,
        # the dispatcher moved runs for the seconds the workers took to start (more on a
        # loaded host), and that work fell outside the first-to-last-ack window.
        while _blocked_readers(c) < workers * partitions:
            if time.perf_counter() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{masters} masters: the workers did not start")
            time.sleep(0.05)
        procs.append(_proc("dispatcher", "--queue", q, url=c.url, favour=fav))
        cpu0, t_cpu = None, 0.0
        while (done := _acked(a)) < n:
            if cpu0 is None and done:
                cpu0, t_cpu = _client_cpu(procs), time.perf_counter()
            if time.perf_counter() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{masters} masters: {done} of {n} runs acked")
            time.sleep(0.02)
        # Counted over the whole drain, from before the processes start to the last ack (read
        # once the masters are idle): a snapshot taken at the first ack waits behind capped,
        # saturated masters and lands seconds late, so it counted only the drain's tail.
        after, window_s = _load(c), time.perf_counter() - t_before
        client_cpu = _client_cpu(procs) - (cpu0 or 0.0)
        client_s = time.perf_counter() - t_cpu
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=30)
    acks = _ack_times_s(a)
    e2e_s = acks[-1] - acks[0]
    # The middle 80 % of the acks: the steady rate, without the ramp-up (the dispatcher's
    # partitions start in turn) and the tail (the last partitions to finish).
    mid_s = acks[int(0.9 * (len(acks) - 1))] - acks[int(0.1 * (len(acks) - 1))]
    spread = sorted(after[p][0] - before[p][0] for p in after)
    cpu = sorted(after[p][1] - before[p][1] for p in after)
    requests = sorted(after[p][2] - before[p][2] for p in after)
    a.close()
    total = max(1, sum(spread))
    return {
        "masters": masters, "partitions": partitions, "n": n, "workers": workers,
        "concurrency": concurrency,
        "e2e_runs_per_s": round(n / max(e2e_s, 1e-3)), "e2e_s": round(e2e_s, 2),
        "steady_runs_per_s": round(0.8 * n / max(mid_s, 1e-3)),
        "enqueue_runs_per_s": round(n / enqueue_s),
        "commands_share_per_master": [round(x / total, 3) for x in spread],
        "requests_share_per_master": [round(x / max(1, sum(requests)), 3) for x in requests],
        "redis_cpu_share_per_master": [round(x / max(1e-9, sum(cpu)), 3) for x in cpu],
        "redis_cpu_s_per_master": [round(x, 2) for x in cpu],
        # Over the whole window the commands are counted in (start-up included), so it reads
        # a little under the cap; Redis CPU per run is the load-robust figure.
        "busiest_master_cpu_percent": round(100 * cpu[-1] / max(window_s, 1e-3), 1),
        "redis_cpu_us_per_run": round(1e6 * sum(cpu) / n, 1),
        "cap_percent": cap, "placed": place, "slot_moves": moves,
        "client_cpu_percent": round(100 * client_cpu / max(client_s, 1e-3)),
    }  # fmt: skip


def _client_cpu(procs: list[subprocess.Popen[bytes]]) -> float:
    """CPU seconds used so far by the dispatcher and worker processes."""
    return sum(cpu_seconds(pid) for p in procs for pid in tree_pids(p.pid))


def run(masters: list[int], n: int, partitions: int, workers: int, concurrency: int,
        repeat: int, cap: float | None = None, place: bool = False) -> dict[str, Any]:  # fmt: skip
    """Every master count `repeat` times, interleaved so drift hits all sizes alike."""
    runs: list[dict[str, Any]] = []
    for _ in range(repeat):
        for m in masters:
            runs.append(one(m, n, partitions, workers, concurrency, cap=cap, place=place))
            r = runs[-1]
            print(f"  {m} masters: {r['e2e_runs_per_s']:,} runs/s (steady "
                  f"{r['steady_runs_per_s']:,}), client CPU "
                  f"{r['client_cpu_percent']} %, busiest master CPU "
                  f"{r['busiest_master_cpu_percent']} %, commands "
                  f"{r['commands_share_per_master']}, Redis CPU "
                  f"{r['redis_cpu_share_per_master']}", flush=True)  # fmt: skip
    best: dict[int, dict[str, Any]] = {}
    for m in masters:
        mine = sorted((r for r in runs if r["masters"] == m), key=lambda r: r["e2e_runs_per_s"])
        best[m] = mine[len(mine) // 2]  # the median run
    return {"median": {str(m): best[m] for m in masters}, "runs": runs,
            "cpus": os.cpu_count()}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    """The medians, with each size's throughput as a multiple of the smallest size's."""
    rows = ["| masters | e2e runs/s | x first | steady runs/s | enqueue runs/s | busiest master's "
            "CPU | Redis commands per master |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    base = next(iter(result["median"].values()))
    for m, r in result["median"].items():
        share = " / ".join(f"{x:.0%}" for x in r["commands_share_per_master"])
        rows.append(f"| {m} | {r['e2e_runs_per_s']:,} | "
                    f"{r['e2e_runs_per_s'] / base['e2e_runs_per_s']:.2f} | "
                    f"{r['steady_runs_per_s']:,} | {r['enqueue_runs_per_s']:,} | "
                    f"{r['busiest_master_cpu_percent']} % | {share} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    ap.add_argument("--masters", default="1,2,3", help="master counts (default 1,2,3)")
    ap.add_argument("--n", type=int, default=60_000, help="runs per measurement")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2, help="worker processes")
    ap.add_argument("--concurrency", type=int, default=128, help="handlers per worker process")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, once (for tests)")
    ap.add_argument("--cap", type=float, default=None, help="cap each master at PCT %% of a core")
    ap.add_argument("--place", action="store_true", help="balance the partitions' slots first")
    a = ap.parse_args(argv)
    masters = [int(x) for x in a.masters.split(",")]
    if a.smoke:
        a.n, a.repeat, masters = 500, 1, masters[:2]
    result = run(masters, a.n, a.partitions, a.workers, a.concurrency, a.repeat, a.cap, a.place)
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    path = out / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"\nall runs: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
