"""AsyncApp on Redis Cluster (a partitioned queue over three masters, durable too) and on a
Sentinel-managed master: the same runs as App's, through the same URL."""

from __future__ import annotations

import asyncio
import uuid

import zsched


async def _round(app: zsched.AsyncApp) -> None:
    ids = await app.enqueue_many([{"task": "t", "payload": i, "run_id": f"a{i}", "delay": 60}
                                  for i in range(300)])  # fmt: skip
    assert len(ids) == 300 and not any(i.duplicate for i in ids)
    assert (await app.enqueue("t", run_id="a1", delay=60)).duplicate
    assert (await app.get_run("a2")).state == "scheduled"
    assert await app.cancel("a3")
    assert (await app.status()).delayed == 299
    assert await app.schedule("nightly", "t", cron="0 3 * * *", tz="UTC") == 1
    assert [i.schedule_id for i in await app.schedules()] == ["nightly"]
    assert await app.unschedule("nightly")


def test_async_app_on_a_cluster_with_partitions_and_durable_writes(cluster) -> None:
    async def main() -> None:
        q = "ac-" + uuid.uuid4().hex[:8]
        app = zsched.AsyncApp(cluster.url, q, partitions=3, durable=True, durable_timeout=2.0)
        await _round(app)
        sync = zsched.App(cluster.url, q, partitions=3)
        assert sync.status().delayed == 299  # what App reads back from the same keys
        assert {sync.run_partition(f"a{i}") for i in range(300)} == {0, 1, 2}
        sync.close()
        await app.aclose()

    asyncio.run(main())


def test_async_app_on_a_sentinel_master(sentinel_group) -> None:
    async def main() -> None:
        q = "as-" + uuid.uuid4().hex[:8]
        app = zsched.AsyncApp(sentinel_group.url, q)
        await _round(app)
        sync = zsched.App(sentinel_group.url, q)
        assert sync.get_run("a2").state == "scheduled"
        sync.close()
        await app.aclose()

    asyncio.run(main())
