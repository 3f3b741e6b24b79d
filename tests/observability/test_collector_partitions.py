"""The queue collector sums every partition of a partitioned queue."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

import zsched
from zsched.observability.collector import QueueCollector


def test_collector_reports_a_partitioned_queue_as_one_total(real, queue) -> None:
    app = zsched.App(real.sync, queue=queue, partitions=4)
    app.enqueue_many([{"task": "t", "run_id": f"r{i}", "delay": 3600} for i in range(40)])
    assert len({app.run_partition(f"r{i}") for i in range(40)}) == 4
    reg = CollectorRegistry()
    QueueCollector(real.sync, [queue], registry=reg)
    assert reg.get_sample_value("zsched_delayed_runs", {"queue": queue}) == 40
    assert reg.get_sample_value("zsched_collector_up", {"queue": queue}) == 1
