"""The console serves a partitioned queue on Redis Cluster (a redis+cluster:// URL): every
page reads, and an action writes, in the partition's own slot."""

from __future__ import annotations

import re
import uuid

import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

import zsched  # noqa: E402
from zsched.store.connection import sync_client  # noqa: E402
from zsched.web import create_app  # noqa: E402

AUTH = {"Authorization": "Bearer cluster-token"}


def test_the_console_serves_a_partitioned_queue_on_redis_cluster(cluster) -> None:
    q = "web-" + uuid.uuid4().hex[:8]
    app = zsched.App(sync_client(cluster.url), queue=q, partitions=3)
    app.enqueue_many([{"task": "t", "run_id": f"c{i}", "delay": 600 + i} for i in range(30)])
    app.schedule("nightly", "t", cron="0 2 * * *", tz="Europe/Berlin")
    web = create_app(redis=cluster.url, queues=[q], environ={"ZSCHED_WEB_TOKEN": "cluster-token"})
    c = TestClient(web)
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]
    assert len(ov["partitions"]) == 3 and ov["total"]["delayed"] == 30 and ov["total"]["rules"] == 1
    ids = []
    for p in range(3):
        body = c.get(f"/q/{q}/runs?p={p}", headers=AUTH).text
        ids += re.findall(r'run\?id=(c\d+)">', body)
    assert sorted(ids) == sorted(f"c{i}" for i in range(30))
    home = app.partition_for("nightly")
    rules = c.get(f"/q/{q}/rules?p={home}", headers=AUTH).text
    assert "nightly" in rules and "+0100 Europe/Berlin" in rules
    assert "cron &#39;0 2 * * *&#39;" in c.get(f"/q/{q}/rule?id=nightly", headers=AUTH).text
    body = c.get(f"/q/{q}/run?id=c7", headers=AUTH).text
    assert "scheduled" in body
    csrf = re.search(r'name="csrf" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    r = c.post(f"/q/{q}/act/cancel", data={"csrf": csrf, "run_id": "c7"}, headers=AUTH)
    assert r.status_code == 200 and "cancelled run c7" in r.text
    assert app.get_run("c7").state == "cancelled"  # a cancel is recorded (issue #20)
    csrf = re.search(r'name="csrf" value="([^"]+)"', r.text).group(1)  # type: ignore[union-attr]
    r = c.post(f"/q/{q}/act/pause-queue", data={"csrf": csrf, "note": "cluster"}, headers=AUTH)
    assert r.status_code == 200 and app.status().paused  # every partition, across slots
    assert "is paused since" in c.get(f"/q/{q}/runs?p=2", headers=AUTH).text


def test_the_console_serves_a_queue_through_sentinel(sentinel_group) -> None:
    q = "web-" + uuid.uuid4().hex[:8]
    url = sentinel_group.url
    app = zsched.App(url, queue=q)
    app.enqueue("t", {"k": 1}, delay=600, run_id="s1")
    c = TestClient(create_app(redis=url, queues=[q], environ={"ZSCHED_WEB_TOKEN": "cluster-token"}))
    assert c.get("/api/overview", headers=AUTH).json()["queues"][0]["total"]["delayed"] == 1
    assert "scheduled" in c.get(f"/q/{q}/run?id=s1", headers=AUTH).text
    assert "s1" in c.get(f"/q/{q}/runs", headers=AUTH).text
    app.close()
