"""Cluster and Sentinel URLs: parsing, redaction, the clients they build."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio.cluster as aiocluster
import redis.cluster
from cluster_harness import Cluster
from sentinel_harness import SentinelGroup

import zsched
from zsched.errors import ConfigError
from zsched.observability.metrics import Metrics
from zsched.store.connection import async_client, async_from_sync, sync_client
from zsched.store.urls import parse, redact, redact_text


def test_a_cluster_url_names_its_nodes_credentials_and_options() -> None:
    t = parse("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001/?socket_timeout=2.5")
    assert t.kind == "cluster" and t.nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert t.auth == {"username": "u", "password": "p@ss"} and t.options == {"socket_timeout": 2.5}
    assert not t.ssl and parse("rediss+cluster://h:1").ssl


def test_a_sentinel_url_names_its_service_database_and_sentinel_password() -> None:
    t = parse("redis+sentinel://:secret@s1:26379,s2:26380/mymaster/2?sentinel_password=sp")
    assert t.kind == "sentinel" and t.service == "mymaster" and t.db == 2
    assert t.nodes == [("s1", 26379), ("s2", 26380)]
    assert t.auth == {"password": "secret"} and t.sentinel_password == "sp"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis+sentinel://s1:26379", "service name"),
        ("redis+cluster://h:notaport", "bad port"),
        ("redis+cluster://h", "expected host:port"),
        ("redis+cluster://h:1/3", "only database 0"),
        ("redis+cluster://h:1/?color=blue", "unknown option 'color'"),
        ("redis+cluster://h:1/?sentinel_password=x", "unknown option"),
        ("redis+sentinel://s:1/m/?socket_timeout=soon", "must be seconds"),
        ("redis+cluster://", "names no host:port"),
        ("redis+bogus://h:1", "unsupported Redis URL scheme"),
    ],
)
def test_a_bad_url_is_a_config_error_naming_the_problem(url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse(url)


def test_secrets_in_cluster_and_sentinel_urls_are_redacted() -> None:
    url = "redis+cluster://admin:hunter2@h1:7000,h2:7001"
    assert "hunter2" not in redact(url) and "h1:7000,h2:7001" in redact(url)
    text = f"cannot reach {url} nor redis+sentinel://:pw@s:1/m nor rediss://x:y@h:1"
    clean = redact_text(text)
    assert "hunter2" not in clean and ":pw@" not in clean and "x:y" not in clean
    with pytest.raises(ConfigError) as info:
        parse("redis+cluster://admin:hunter2@h1:7000/?bad=1")
    assert "hunter2" not in str(info.value)


def test_a_sentinel_url_gives_clients_of_the_named_master(sentinel_group: SentinelGroup) -> None:
    c = sync_client(sentinel_group.url)
    try:
        assert c.connection_pool.service_name == sentinel_group.service
        assert c.set("k", "v") and c.get("k") == b"v"  # bytes: decode_responses stays off
        port = c.connection_pool.get_master_address()[1]
        assert port == sentinel_group.current_master_port()
    finally:
        c.close()

    async def roundtrip() -> bytes:
        a = async_client(sentinel_group.url)
        b = async_from_sync(sync_client(sentinel_group.url))
        try:
            return bytes(await a.get("k")) + bytes(await b.get("k"))
        finally:
            await a.aclose()
            await b.aclose()

    assert asyncio.run(roundtrip()) == b"vv"


async def test_an_app_given_a_cluster_client_builds_its_processes_from_it(
    cluster: Cluster, queue: str
) -> None:
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, protocol=2)
    app = zsched.App(rc, queue=queue, partitions=3, metrics=Metrics())
    done: list[str] = []

    @app.task(name="t")
    async def t(payload: None) -> None:
        done.append(zsched.current_run().run_id)

    app.enqueue_many([{"task": "t", "run_id": f"r{i}"} for i in range(30)])
    d, w = app.dispatcher(), app.worker()
    assert isinstance(d.redis, aiocluster.RedisCluster)
    try:
        assert sum(r.moved for r in await d.tick()) == 30
        assert await w.tick() == 30
    finally:
        await d.close()
        await w.close()
        rc.close()
    assert sorted(done) == sorted(f"r{i}" for i in range(30))
