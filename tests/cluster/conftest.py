"""Fixtures of the cluster and Sentinel tests: one real Redis Cluster (3 masters + 3 replicas)
for the session, Sentinel groups per test, and the `cluster_long` marker.

Tests marked `cluster_long` run only under `make cluster-test` (ZSCHED_CLUSTER_LONG=1); the
rest stay in `make test` and together take well under a minute.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster_harness import Cluster  # noqa: E402
from sentinel_harness import SentinelGroup  # noqa: E402

from zsched.store.connection import sync_client  # noqa: E402

LONG = os.environ.get("ZSCHED_CLUSTER_LONG") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_long: longer cluster/Sentinel tests, run by `make cluster-test`"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if LONG:
        return
    skip = pytest.mark.skip(reason="longer cluster test: run `make cluster-test`")
    for item in items:
        if "cluster_long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A Redis Cluster shared by the session. Tests that kill a node heal it before they end."""
    with Cluster(masters=3, replicas=1) as c:
        yield c


@pytest.fixture
def healthy_cluster(cluster: Cluster) -> Iterator[Cluster]:
    """The session cluster, healed (killed nodes restarted as replicas) after the test."""
    yield cluster
    cluster.heal()


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[Any]:
    """A zsched cluster client (redis+cluster:// URL) of the session cluster."""
    c = sync_client(cluster.url)
    yield c
    c.close()


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    """A master, one replica and three Sentinels (down-after-milliseconds 1000), per test."""
    with SentinelGroup(replicas=1, sentinels=3, down_after_ms=1000) as g:
        yield g
