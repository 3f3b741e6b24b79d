"""The eviction-policy guard (zsched/store/eviction.py): on a redis-server whose maxmemory-policy may
evict zsched's keys, dispatchers and workers refuse to start and say what to set; with
allow_eviction they run, with the metric at 1 (the alert ZschedRedisMayEvict watches it)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis_server import RedisServer
from rel_helpers import alive, records, running, until

import zsched
from zsched.observability.metrics import Metrics
from zsched.store.eviction import assess

ROOT = Path(__file__).resolve().parents[2]
LRU = ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")


@pytest.fixture(scope="module")
def lru_server() -> Iterator[RedisServer]:
    with RedisServer(*LRU) as srv:
        yield srv


def risk(metrics: Metrics, queue: str, role: str) -> float | None:
    return metrics.registry.get_sample_value(
        "zsched_redis_eviction_risk", {"queue": queue, "role": role}
    )


async def test_on_allkeys_lru_the_dispatcher_and_the_worker_refuse_to_start(
    lru_server, queue
) -> None:
    app = zsched.App(lru_server.url, queue=queue, metrics=Metrics())
    app.enqueue("t", run_id="r1")
    d, w = app.dispatcher(), app.worker()
    for proc, role in ((d, "dispatcher"), (w, "worker")):
        with pytest.raises(zsched.EvictionPolicyError) as info:
            await asyncio.wait_for(proc.run(asyncio.Event()), 30)
        msg = str(info.value)
        assert f"{role} of queue {queue!r} refuses to start" in msg
        assert "maxmemory-policy allkeys-lru" in msg and "vanish" in msg
        assert "Set maxmemory-policy noeviction" in msg and "--allow-eviction" in msg
        assert isinstance(info.value, zsched.ConfigError)
        await proc.close()
    assert app.get_run("r1").state == "scheduled"  # nothing was dispatched
    app.close()


async def test_with_allow_eviction_they_run_and_the_metric_says_so(
    lru_server, queue, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    metrics = Metrics()
    app = zsched.App(lru_server.url, queue=queue, metrics=metrics)
    ran: list[str] = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(zsched.current_run().run_id)

    async with running(app, {"allow_eviction": True}, allow_eviction=True) as tasks:
        app.enqueue("t", run_id="r1")
        await until(lambda: ran == ["r1"], "the run")
        assert alive(tasks)
        assert risk(metrics, queue, "dispatcher") == 1
        assert risk(metrics, queue, "worker") == 1
    assert len(records(caplog, logging.WARNING, "runs with --allow-eviction")) == 2
    app.close()


async def test_a_policy_changed_under_running_processes_is_noticed(queue, caplog) -> None:
    caplog.set_level(logging.INFO)
    with RedisServer("--maxmemory", "64mb") as srv:  # noeviction, the default
        metrics = Metrics()
        app = zsched.App(srv.url, queue=queue, metrics=metrics)
        ran: list[str] = []

        @app.task(name="t")
        async def t(payload: object) -> None:
            ran.append(zsched.current_run().run_id)

        stop = asyncio.Event()
        d, w = app.dispatcher(max_idle_ms=100), app.worker(block_ms=100)  # passes come often
        d.eviction.every_s = w.eviction.every_s = 0.05  # read the policy often in this test
        tasks = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
        try:
            await until(lambda: risk(metrics, queue, "worker") == 0, "the worker's first check")
            await until(lambda: risk(metrics, queue, "dispatcher") == 0, "the dispatcher's")
            srv_client = redis.Redis(port=srv.port)
            srv_client.config_set("maxmemory-policy", "volatile-lru")
            await until(lambda: risk(metrics, queue, "worker") == 1, "the worker seeing it")
            await until(lambda: risk(metrics, queue, "dispatcher") == 1, "the dispatcher seeing it")
            errors = records(caplog, logging.ERROR, "maxmemory-policy volatile-lru")
            assert len(errors) == 2 and "per-task limit counters" in errors[0].getMessage()
            app.enqueue("t", run_id="r1")  # running processes go on (the alert is the signal)
            await until(lambda: ran == ["r1"], "the run")
            srv_client.config_set("maxmemory-policy", "noeviction")
            await until(lambda: risk(metrics, queue, "worker") == 0, "the fix seen")
            srv_client.close()
            assert alive(tasks)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await d.close()
            await w.close()
        assert len(records(caplog, logging.ERROR, "maxmemory-policy")) == 2  # once each
        app.close()


def test_the_cli_refuses_and_says_what_to_set_unless_allowed(lru_server, queue) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    args = [sys.executable, "-m", "zsched", "-v", "dispatcher", "--redis", lru_server.url,
            "--queue", queue]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert p.returncode == 1, p.stderr
    assert "refuses to start" in p.stderr and "maxmemory-policy noeviction" in p.stderr
    assert "Traceback" not in p.stderr
    allowed = subprocess.Popen([*args, "--allow-eviction"], env=env, cwd=ROOT,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert allowed.stderr is not None
        seen = ""
        for line in allowed.stderr:  # it runs and says it runs at risk
            seen += line
            if "runs with --allow-eviction" in line:
                break
        assert allowed.poll() is None, seen
    finally:
        allowed.terminate()
        allowed.wait(20)
        if allowed.stderr is not None:
            allowed.stderr.close()
    assert allowed.returncode == 0


def test_the_volatile_risk_names_the_keys_with_a_ttl_and_not_the_overlap_leases() -> None:
    """Rules' overlap leases have no TTL (a lease lasts while its run lives): a `volatile-*`
    policy cannot evict one, and the warning does not say it could."""
    risk = assess({"maxmemory_policy": "volatile-lru", "maxmemory": 1 << 26}).risk
    assert risk is not None
    assert "lease" not in risk and "overlap" not in risk
    for what in ("completion", "cancel", "outcomes", "limit"):
        assert what in risk


@pytest.mark.parametrize(
    ("policy", "maxmemory", "at_risk"),
    [
        ("noeviction", 1 << 26, False),
        ("allkeys-lru", 0, False),  # no maxmemory: Redis never evicts
        ("allkeys-lru", 1 << 26, True),
        ("allkeys-lfu", 1 << 26, True),
        ("allkeys-random", 1 << 26, True),
        ("volatile-lru", 1 << 26, True),  # done records, outcomes, limit counters have TTLs
        ("volatile-lfu", 1 << 26, True),
        ("volatile-random", 1 << 26, True),
        ("volatile-ttl", 1 << 26, True),
    ],
)
def test_every_policy_but_noeviction_is_a_risk_when_maxmemory_is_set(
    policy: str, maxmemory: int, at_risk: bool
) -> None:
    v = assess({"maxmemory_policy": policy, "maxmemory": maxmemory})
    assert (v.risk is not None) == at_risk
