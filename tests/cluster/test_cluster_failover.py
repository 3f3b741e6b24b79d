"""SIGKILL a master of a real Redis Cluster mid-workload: its replica takes over, work goes
on, and with durable=True no acknowledged enqueue is lost."""

from __future__ import annotations

import time
from collections import Counter

from cluster_harness import Cluster, Node
from failover import Workload

from zsched.protocol.keys import QueueKeys


def busiest_master(c: Cluster, queue: str, n: int) -> tuple[Node, set[int]]:
    """The master that serves most partitions of `queue`, and those partitions."""
    owners = {i: c.owner_of(QueueKeys(queue, i).delayed) for i in range(n)}
    node = Counter(owners.values()).most_common(1)[0][0]
    return node, {i for i, o in owners.items() if o is node}


async def test_a_killed_master_fails_over_and_no_durable_enqueue_is_lost(
    healthy_cluster: Cluster, queue: str
) -> None:
    c = healthy_cluster
    plain, durable = f"{queue}-p", f"{queue}-d"
    lanes = {plain: {"partitions": 8},
             durable: {"partitions": 8, "durable": True, "durable_timeout": 0.5}}  # fmt: skip
    wl = Workload(c.url, lanes)
    victim, hit = busiest_master(c, durable, 8)
    p, d = wl.lanes[plain], wl.lanes[durable]
    await wl.start()
    try:
        await wl.until(lambda: len(d.executed) > 300 and len(p.executed) > 300, 60, "warm-up")
        killed_at = time.monotonic()
        c.kill(victim)
        c.wait_failover(victim)
        failed_over = time.monotonic()
        # Bring the old master back as a replica: durable enqueues on its shard need one.
        c.heal()
        healed = time.monotonic()
        await wl.until(lambda: len(d.acked_after(healed)) > 200, 60, "durable enqueues again")
        await wl.until(lambda: len(p.acked_after(healed)) > 200, 60, "plain enqueues again")
        wl.stop_enqueueing()
        try:
            await wl.until(lambda: not d.lost and wl.drained(d), 60, "every acked durable run")
            await wl.until(lambda: wl.drained(p), 60, "the plain queue to drain")
        except AssertionError as exc:
            detail = d.describe(sorted(d.lost)[:10])
            raise AssertionError(f"{exc}: {d.app.status()} {p.app.status()} {detail}") from None
    finally:
        await wl.stop()
    # The failover is shorter than the lanes' outage_retry_ms (60 s): enqueue rode through it,
    # no error reached the caller (before: ~90 ConnectionErrors per failover).
    assert not p.refused and not d.refused, dict(p.errors + d.errors)
    assert not d.lost, f"acknowledged durable enqueues lost: {sorted(d.lost)[:10]}"
    # Work continued: every run acknowledged once the cluster was whole again ran.
    assert set(p.acked_after(healed)) <= set(p.executed)
    # Nothing ran that was never enqueued.
    assert set(p.executed) <= set(p.acked) | set(p.refused)
    assert set(d.executed) <= set(d.acked) | set(d.refused)
    summary = {
        "failover_s": round(failed_over - killed_at, 2),
        "dispatch_gap_s (killed partitions)": round(d.gap(killed_at, hit), 2),
        "plain: acked": len(p.acked), "plain: lost": len(p.lost),
        "plain: refused": len(p.refused), "plain: ran twice": p.twice,
        "durable: acked": len(d.acked), "durable: lost": len(d.lost),
        "durable: refused": len(d.refused), "durable: ran twice": d.twice,
        "errors": dict(p.errors + d.errors),
    }  # fmt: skip
    print(f"\ncluster failover: {summary}")
