"""The eviction-policy guard on Redis Cluster reads the master that holds the queue's slot."""

from __future__ import annotations

import asyncio

import pytest
import redis
from cluster_harness import Cluster

import zsched
from zsched.observability.metrics import Metrics


async def test_a_cluster_master_with_allkeys_lru_is_refused(cluster: Cluster, queue: str) -> None:
    app = zsched.App(cluster.url, queue=queue, metrics=Metrics())
    owner = cluster.owner_of(app.keys.ready)
    r = redis.Redis(port=owner.port)
    r.config_set("maxmemory", "512mb")
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        d = app.dispatcher()
        with pytest.raises(zsched.EvictionPolicyError, match="allkeys-lru"):
            await asyncio.wait_for(d.run(asyncio.Event()), 30)
        await d.close()
    finally:
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", "0")
        r.close()
    # The other masters were never at risk; the fixed one passes now.
    d = app.dispatcher()
    verdict = await d.eviction.check(force=True)
    assert verdict is not None and verdict.risk is None
    await d.close()
    app.close()
