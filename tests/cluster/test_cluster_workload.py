"""A partitioned queue on a real Redis Cluster (3 masters + 3 replicas), through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import redis
from cluster_harness import Cluster, wait_until
from cluster_procs import ROOT, executed, stop, zsched_proc

import zsched
from zsched.protocol.keys import QueueKeys


def test_a_workload_over_8_partitions_runs_every_run(cluster: Cluster, redis_url: str,
                                                     queue: str) -> None:  # fmt: skip
    app = zsched.App(cluster.url, queue=queue, partitions=8)
    owners = {cluster.owner_of(QueueKeys(queue, i).delayed).port for i in range(8)}
    assert len(owners) > 1  # the partitions spread over the masters
    now = time.time()
    ids = [f"w{i}" for i in range(3000)]
    # Half due now, half over the next second: dispatchers see both a backlog and a timer.
    app.enqueue_many([{"task": "record", "run_id": rid, "run_at": now + (i % 2) * (i / 3000)}
                      for i, rid in enumerate(ids)])  # fmt: skip
    assert app.enqueue("record", run_id="w7").duplicate
    sink = redis.Redis.from_url(redis_url)
    common = dict(url=cluster.url, sink=redis_url, partitions=8)
    procs = [zsched_proc("dispatcher", "--queue", queue, **common),  # partitions from Redis
             zsched_proc("worker", "cluster_app:app", "--queue", queue, "--concurrency", "16",
                         **common),
             zsched_proc("worker", "cluster_app:app", "--queue", queue, "--concurrency", "16",
                         **common)]  # fmt: skip
    try:
        wait_until(lambda: len(executed(sink, queue)) == len(ids), 60, "every run executed")
    finally:
        outs = [stop(p) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert not any("Traceback" in o or "lost Redis" in o for o in outs), outs
    assert set(executed(sink, queue)) == set(ids)
    st = app.status()
    assert st.stats["acked"] == len(ids) and st.delayed == 0 and st.pending == 0
    parts = app.partition_statuses()
    assert len(parts) == 8 and all(p.stats.get("acked", 0) > 0 for p in parts)
    out = subprocess.run(
        [sys.executable, "-m", "zsched", "status", "--json", "--redis", cluster.url,
         "--queue", queue], capture_output=True, check=True, cwd=ROOT,
    )  # fmt: skip
    shown = json.loads(out.stdout)
    assert len(shown["partitions"]) == 8 and shown["stats"]["acked"] == len(ids)
    assert sum(p["stats"]["acked"] for p in shown["partitions"]) == len(ids)
    sink.close()
    app.close()
