"""A worker's stream reads on a cluster go straight to their slot: no COMMAND GETKEYS."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from cluster_harness import Cluster

from zsched.store.connection import async_client


def _getkeys_calls(cluster: Cluster) -> int:
    total = 0
    for port in cluster.master_ports():
        r = redis.Redis(port=port)
        stats: Any = r.info("commandstats")
        total += int(stats.get("cmdstat_command|getkeys", {}).get("calls", 0))
        r.close()
    return total


def test_xreadgroup_costs_no_command_getkeys_round_trip(cluster: Cluster) -> None:
    async def go() -> list[Any]:
        c = async_client(cluster.url)
        try:
            key = "zsched:{readslot}:ready"
            await c.xgroup_create(key, "g", id="0", mkstream=True)
            await c.xadd(key, {"f": "v"})
            before = _getkeys_calls(cluster)
            got = []
            for _ in range(5):
                got.append(await c.xreadgroup("g", "c", {key: ">"}, count=10))
            got.append(await c.xread({key: "0"}, count=10))
            assert _getkeys_calls(cluster) == before
            await c.delete(key)
            return got
        finally:
            await c.aclose()

    got = asyncio.run(go())
    assert got[0][0][1][0][1] == {b"f": b"v"}  # the read reached the stream's master
    assert got[-1][0][1][0][1] == {b"f": b"v"}
