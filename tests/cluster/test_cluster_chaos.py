"""The chaos workload on Redis Cluster (tests/chaos/chaos_cluster.py): the master holding the
queue is SIGKILLed mid-load with process kills, zombies, CLIENT KILLs and a SCRIPT FLUSH; with
and without durable=True. `make cluster-test` runs this short version; `make cluster-chaos`
the long one (figures in docs/reliability.md)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))

from chaos_checks import judge  # noqa: E402
from chaos_cluster import SMOKE, run_cluster  # noqa: E402

pytestmark = pytest.mark.cluster_long

#: What losing acknowledged plain (non-durable) enqueues in a failover looks like to the
#: checks; asynchronous replication allows it. Nothing else may fail.
LOSS = ("enqueued runs never executed", "runs not done at the end", "stats enqueued")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("durable", [True, False], ids=["durable", "plain"])
def test_a_master_killed_under_the_chaos_workload_loses_nothing_durable(
    tmp_path, durable: bool, capsys
) -> None:
    obs = run_cluster(dataclasses.replace(SMOKE, seed=20261129, durable=durable), tmp_path)
    failures, table = judge(obs)
    with capsys.disabled():
        print(f"\ncluster chaos, durable={durable}\n{table}")
    assert obs.faults["master_kill"] == 1
    if not durable:
        failures = [x for x in failures if not any(s in x for s in LOSS)]
    assert failures == [], "\n".join(failures) + "\nfaults:\n" + "\n".join(obs.fault_log)
