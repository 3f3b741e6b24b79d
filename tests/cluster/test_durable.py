"""durable=True on one server with (and without) a replica: WAIT 1 on the enqueue's connection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from cluster_harness import FAST, wait_until
from redis_server import RedisServer

import zsched
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import QueueKeys


@pytest.fixture(scope="module")
def replicated() -> Iterator[tuple[RedisServer, RedisServer]]:
    with RedisServer(*FAST) as master:
        with RedisServer("--replicaof", "127.0.0.1", str(master.port)) as replica:
            wait_replicated(master.port)
            yield master, replica


def wait_replicated(port: int) -> None:
    """Until a write on the master is acknowledged by a replica (the first sync is done)."""
    c = redis.Redis(port=port)

    def acked() -> bool:
        pipe = c.pipeline(transaction=False)
        pipe.set("probe", 1)
        pipe.execute_command("WAIT", 1, 100)
        return int(pipe.execute()[-1]) >= 1

    try:
        wait_until(acked, 30, "a replica that acknowledges writes")
    finally:
        c.close()


def test_a_durable_enqueue_without_a_replica_raises_but_keeps_the_write(redis_url, queue) -> None:
    # NotReplicated is retried up to outage_retry_ms (a failover's new master has no replica
    # for a moment); no replica ever comes here, so the bound is short.
    app = zsched.App(redis_url, queue=queue, durable=True, durable_timeout=0.05, metrics=Metrics(),
                     settings=zsched.QueueSettings(outage_retry_ms=300))  # fmt: skip
    with pytest.raises(zsched.NotReplicated, match="failed after .* no replica acknowledged"):
        app.enqueue("t", run_id="r1")
    with pytest.raises(zsched.NotReplicated):
        app.enqueue_many([{"task": "t", "run_id": f"m{i}"} for i in range(1500)])
    plain = zsched.App(redis_url, queue=queue, metrics=Metrics())
    assert plain.enqueue("t", run_id="r1").duplicate  # written on the master all the same
    assert plain.status().delayed == 1501


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_durable_enqueue_returns_once_the_replica_holds_the_runs(
    replicated: tuple[RedisServer, RedisServer], queue: str, partitions: int
) -> None:
    master, replica = replicated
    app = zsched.App(master.url, queue=queue, durable=True, partitions=partitions,
                     metrics=Metrics())  # fmt: skip
    ids = [f"r{i}" for i in range(2500)]
    assert not app.enqueue("t", run_id="one").duplicate
    assert not any(x.duplicate for x in app.enqueue_many([{"task": "t", "run_id": i} for i in ids]))
    # Read the replica directly, right after the acknowledgement: everything is already there.
    r = redis.Redis(port=replica.port)
    try:
        held = sum(int(r.hlen(QueueKeys(queue, p if partitions > 1 else None).runs))
                   for p in range(partitions))  # fmt: skip
    finally:
        r.close()
    assert held == len(ids) + 1
    app.close()


def test_durable_timeout_must_be_positive(redis_url) -> None:
    with pytest.raises(ValueError, match="durable_timeout"):
        zsched.App(redis_url, durable=True, durable_timeout=0)
