"""Longer failover runs (make cluster-test): CLI processes through a master kill, and every
master of the cluster killed in turn."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from cluster_harness import Cluster, wait_until
from cluster_procs import executed, stop, zsched_proc
from failover import Workload
from test_cluster_failover import busiest_master

import zsched
from zsched.observability.metrics import Metrics
from zsched.store.connection import RETRYABLE_ERRORS

pytestmark = pytest.mark.cluster_long


def test_cli_processes_ride_through_a_master_kill(healthy_cluster: Cluster, redis_url: str,
                                                   queue: str) -> None:  # fmt: skip
    c = healthy_cluster
    app = zsched.App(c.url, queue=queue, partitions=8, durable=True, durable_timeout=0.5,
                     metrics=Metrics())  # fmt: skip
    acked: list[str] = []
    halt = threading.Event()

    def enqueue() -> None:
        n = 0
        while not halt.is_set():
            ids = [f"c{n + i}" for i in range(5)]
            n += 5
            try:
                app.enqueue_many([{"task": "record", "run_id": r} for r in ids])
                acked.extend(ids)
            except (zsched.NotReplicated, *RETRYABLE_ERRORS):
                halt.wait(0.05)
            halt.wait(0.005)

    sink = redis.Redis.from_url(redis_url)
    common = dict(url=c.url, sink=redis_url, partitions=8)
    procs = [zsched_proc("dispatcher", "--queue", queue, **common)]
    procs += [zsched_proc("worker", "cluster_app:app", "--queue", queue, "--concurrency", "16",
                          "--visibility-timeout", "2", **common) for _ in range(2)]  # fmt: skip
    t = threading.Thread(target=enqueue, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(executed(sink, queue)) > 500, 60, "warm-up")
        victim, _ = busiest_master(c, queue, 8)
        c.kill(victim)
        c.wait_failover(victim)
        c.heal()
        mark = len(acked)
        wait_until(lambda: len(acked) > mark + 1000, 60, "enqueues after the failover")
        halt.set()
        t.join(10)
        wait_until(lambda: set(acked) <= set(executed(sink, queue)), 90, "every acked run")
    finally:
        halt.set()
        outs = [stop(p) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert set(acked) <= set(executed(sink, queue))
    sink.close()
    app.close()


async def test_every_master_killed_in_turn_loses_no_durable_enqueue(
    healthy_cluster: Cluster, queue: str
) -> None:
    c = healthy_cluster
    wl = Workload(c.url, {queue: {"partitions": 8, "durable": True, "durable_timeout": 0.5}})
    lane = wl.lanes[queue]
    await wl.start()
    gaps = []
    try:
        for _ in range(len(c.master_ports())):
            await wl.until(lambda: len(lane.executed) > 300, 60, "work")
            victim = next(n for n in c.nodes if n.alive and n.port == c.master_ports()[0])
            killed = time.monotonic()
            c.kill(victim)
            c.wait_failover(victim)
            c.heal()
            healed = time.monotonic()
            await wl.until(lambda h=healed: len(lane.acked_after(h)) > 200, 60, "enqueues again")
            gaps.append(round(lane.gap(killed), 2))
        wl.stop_enqueueing()
        await wl.until(lambda: not lane.lost and wl.drained(lane), 90, "every acked run")
    finally:
        await wl.stop()
    assert not lane.lost
    print(
        f"\nthree failovers: gaps {gaps}s, acked {len(lane.acked)}, refused "
        f"{len(lane.refused)}, ran twice {lane.twice}"
    )
