"""QueueCollector against a real redis-server: state written with plain Redis commands."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import redis
from observability_helpers import free_port, redis_server
from prometheus_client import CollectorRegistry, generate_latest
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.state import add_delayed
from zsched.clock import FakeClock
from zsched.observability.collector import (
    COLLECTED_COUNTERS,
    COLLECTED_METRICS,
    PENDING_SAMPLE,
    QueueCollector,
)
from zsched.protocol.keys import GROUP, QueueKeys

NOW_MS = 1_800_000_000_000  # a pinned instant (2027-01-15T08:00:00Z)


@pytest.fixture(scope="module")
def r(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(queue: str) -> QueueKeys:
    return QueueKeys(queue)


def scrape(client: redis.Redis, *queues: str, clock: FakeClock | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    QueueCollector(client, list(queues), registry=registry, clock=clock)
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def fill_stream(r: redis.Redis, stream: str, n: int) -> list[bytes]:
    return [r.xadd(stream, {"run_id": f"run-{i}", "envelope": b"x"}) for i in range(n)]


def test_a_queue_without_any_key_reads_as_zeros(r: redis.Redis, queue: str) -> None:
    reg = scrape(r, queue, clock=FakeClock(NOW_MS))
    for name in COLLECTED_METRICS:
        if name.startswith("zsched_rule_"):
            continue
        expected = 1.0 if name == "zsched_collector_up" else 0.0
        assert value(reg, name, queue=queue) == expected, name
    text = generate_latest(reg).decode()
    assert "zsched_rule_next_fire_timestamp_seconds{" not in text
    assert "zsched_rule_last_fire_timestamp_seconds{" not in text


def test_due_backlog_counts_runs_whose_time_has_come_and_ages_the_oldest(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    add_delayed(
        r, keys,
        {"late-5s": NOW_MS - 5000, "late-1s": NOW_MS - 1000, "exactly-now": NOW_MS,
         "future": NOW_MS + 60_000},
    )  # fmt: skip
    reg = scrape(r, queue, clock=FakeClock(NOW_MS))
    assert value(reg, "zsched_delayed_runs", queue=queue) == 4
    assert value(reg, "zsched_due_backlog_runs", queue=queue) == 3
    assert value(reg, "zsched_due_backlog_oldest_age_seconds", queue=queue) == pytest.approx(5.0)


def test_due_backlog_age_is_zero_when_nothing_is_due(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    add_delayed(r, keys, {"future": NOW_MS + 1, "later": NOW_MS + 10_000})
    reg = scrape(r, queue, clock=FakeClock(NOW_MS))
    assert value(reg, "zsched_delayed_runs", queue=queue) == 2
    assert value(reg, "zsched_due_backlog_runs", queue=queue) == 0
    assert value(reg, "zsched_due_backlog_oldest_age_seconds", queue=queue) == 0


def test_due_backlog_uses_the_redis_server_time_by_default(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    sec, usec = r.time()
    server_ms = sec * 1000 + usec // 1000
    add_delayed(r, keys, {"late": server_ms - 10_000, "future": server_ms + 3_600_000})
    reg = scrape(r, queue)  # no clock: the script reads TIME
    assert value(reg, "zsched_due_backlog_runs", queue=queue) == 1
    age = value(reg, "zsched_due_backlog_oldest_age_seconds", queue=queue)
    assert age is not None and 10.0 <= age < 15.0


def test_stream_length_lag_and_pending_follow_the_consumer_group(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.xgroup_create(keys.ready, GROUP, id="0", mkstream=True)
    fill_stream(r, keys.ready, 5)
    r.xreadgroup(GROUP, "worker-a", {keys.ready: ">"}, count=2)
    reg = scrape(r, queue)
    assert value(reg, "zsched_stream_length", queue=queue) == 5
    assert value(reg, "zsched_consumer_group_lag", queue=queue) == 3
    assert value(reg, "zsched_pending_runs", queue=queue) == 2


def test_lag_falls_back_to_undelivered_entries_when_redis_reports_none(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.xgroup_create(keys.ready, GROUP, id="0", mkstream=True)
    ids = fill_stream(r, keys.ready, 6)
    r.xreadgroup(GROUP, "worker-a", {keys.ready: ">"}, count=2)
    r.xack(keys.ready, GROUP, ids[0])
    r.xdel(keys.ready, ids[0])  # as the ack script does
    r.xdel(keys.ready, ids[4])  # a tombstone ahead of the group: Redis can no longer count
    (group,) = r.xinfo_groups(keys.ready)
    assert group["lag"] is None  # the precondition of the fallback
    reg = scrape(r, queue)
    # on the stream: ids 1, 2, 3, 5; pending: id 1; not delivered: 2, 3, 5
    assert value(reg, "zsched_stream_length", queue=queue) == 4
    assert value(reg, "zsched_pending_runs", queue=queue) == 1
    assert value(reg, "zsched_consumer_group_lag", queue=queue) == 3


def test_a_stream_without_the_group_counts_every_entry_as_lag(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    fill_stream(r, keys.ready, 3)
    reg = scrape(r, queue)
    assert value(reg, "zsched_collector_up", queue=queue) == 1
    assert value(reg, "zsched_stream_length", queue=queue) == 3
    assert value(reg, "zsched_consumer_group_lag", queue=queue) == 3
    assert value(reg, "zsched_pending_runs", queue=queue) == 0
    assert value(reg, "zsched_pending_oldest_idle_seconds", queue=queue) == 0


def test_another_group_on_the_stream_is_ignored(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.xgroup_create(keys.ready, "auditors", id="0", mkstream=True)
    fill_stream(r, keys.ready, 2)
    r.xreadgroup("auditors", "a", {keys.ready: ">"})
    reg = scrape(r, queue)
    assert value(reg, "zsched_consumer_group_lag", queue=queue) == 2
    assert value(reg, "zsched_pending_runs", queue=queue) == 0


def test_oldest_pending_idle_is_the_largest_idle_time_of_pending_entries(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.xgroup_create(keys.ready, GROUP, id="0", mkstream=True)
    ids = fill_stream(r, keys.ready, 3)
    r.xreadgroup(GROUP, "worker-a", {keys.ready: ">"})
    # XCLAIM ... IDLE sets an entry's idle time: the middle one looks 50 s old.
    r.xclaim(keys.ready, GROUP, "worker-a", 0, [ids[1]], idle=50_000, justid=True)
    reg = scrape(r, queue)
    idle = value(reg, "zsched_pending_oldest_idle_seconds", queue=queue)
    assert idle is not None and 50.0 <= idle < 55.0
    assert value(reg, "zsched_pending_runs", queue=queue) == 3


def test_oldest_pending_idle_only_looks_at_the_first_hundred_entries(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.xgroup_create(keys.ready, GROUP, id="0", mkstream=True)
    ids = fill_stream(r, keys.ready, PENDING_SAMPLE + 5)
    r.xreadgroup(GROUP, "worker-a", {keys.ready: ">"})
    r.xclaim(keys.ready, GROUP, "worker-a", 0, [ids[PENDING_SAMPLE - 1]], idle=20_000, justid=True)
    r.xclaim(keys.ready, GROUP, "worker-a", 0, [ids[PENDING_SAMPLE + 2]], idle=90_000, justid=True)
    reg = scrape(r, queue)
    assert value(reg, "zsched_pending_runs", queue=queue) == PENDING_SAMPLE + 5
    idle = value(reg, "zsched_pending_oldest_idle_seconds", queue=queue)
    assert idle is not None and 20.0 <= idle < 25.0  # the documented bound: not 90


def test_dead_letters_count_the_dead_letter_stream(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    fill_stream(r, keys.dead, 4)
    reg = scrape(r, queue)
    assert value(reg, "zsched_dead_letters", queue=queue) == 4


def test_rules_report_next_and_last_fire_per_schedule(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.zadd(keys.rule_next, {"nightly": NOW_MS + 3_600_000, "every-5m": NOW_MS + 300_000})
    r.hset(
        keys.rule_state,
        mapping={
            "nightly": msgpack.packb({"last_fire_ms": NOW_MS - 82_800_000, "missed": 0}),
            "every-5m": msgpack.packb({"last_fire_ms": NOW_MS - 1500}),
            "never-fired": msgpack.packb({"last_fire_ms": None}),
            "garbage": b"\xc1 not msgpack",
        },
    )
    reg = scrape(r, queue, clock=FakeClock(NOW_MS))
    nxt = "zsched_rule_next_fire_timestamp_seconds"
    last = "zsched_rule_last_fire_timestamp_seconds"
    assert value(reg, nxt, queue=queue, schedule="nightly") == NOW_MS / 1000 + 3600
    assert value(reg, nxt, queue=queue, schedule="every-5m") == NOW_MS / 1000 + 300
    assert value(reg, last, queue=queue, schedule="nightly") == NOW_MS / 1000 - 82_800
    assert value(reg, last, queue=queue, schedule="every-5m") == pytest.approx(NOW_MS / 1000 - 1.5)
    assert value(reg, last, queue=queue, schedule="never-fired") is None
    assert value(reg, last, queue=queue, schedule="garbage") is None
    assert value(reg, "zsched_collector_up", queue=queue) == 1


def test_a_redis_error_drops_only_that_queue_and_marks_it_down(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    healthy = f"{queue}-ok"
    r.set(keys.delayed, "not a hash")  # WRONGTYPE in lua/status.lua
    fill_stream(r, QueueKeys(healthy).dead, 1)
    reg = scrape(r, queue, healthy)
    assert value(reg, "zsched_collector_up", queue=queue) == 0
    for name in COLLECTED_METRICS:
        if name != "zsched_collector_up":
            assert value(reg, name, queue=queue) is None, name
    assert value(reg, "zsched_collector_up", queue=healthy) == 1
    assert value(reg, "zsched_dead_letters", queue=healthy) == 1


def test_a_wrong_type_ready_key_is_an_error_not_a_missing_group(
    r: redis.Redis, queue: str, keys: QueueKeys
) -> None:
    r.set(keys.ready, "not a stream")
    reg = scrape(r, queue)
    assert value(reg, "zsched_collector_up", queue=queue) == 0


def test_an_unreachable_redis_never_fails_the_scrape() -> None:
    dead = redis.Redis(
        port=free_port(), protocol=2, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    registry = CollectorRegistry()
    QueueCollector(dead, ["a", "b"], registry=registry)  # registering reads nothing
    text = generate_latest(registry).decode()
    assert 'zsched_collector_up{queue="a"} 0.0' in text
    assert 'zsched_collector_up{queue="b"} 0.0' in text
    assert "zsched_stream_length{" not in text


def test_collected_metric_names_are_exactly_the_declared_ones(r: redis.Redis, queue: str) -> None:
    collector = QueueCollector(r, [queue])
    counters = [n.removesuffix("_total") for n in COLLECTED_COUNTERS]
    names = sorted([*COLLECTED_METRICS, *counters])
    assert sorted(m.name for m in collector.describe()) == names
    assert sorted(m.name for m in collector.collect()) == names
    for m in collector.collect():
        assert m.type == ("counter" if m.name in counters else "gauge")
        assert all(s.labels["queue"] == queue for s in m.samples)


def test_the_collector_sits_beside_the_process_metrics_on_one_registry(
    r: redis.Redis, queue: str, tmp_path: Path
) -> None:
    from zsched.observability.metrics import Metrics

    metrics = Metrics()
    QueueCollector(r, [queue], registry=metrics.registry)
    metrics.dispatched.labels(queue=queue).inc()
    text = generate_latest(metrics.registry).decode()
    assert f'zsched_runs_dispatched_total{{queue="{queue}"}} 1.0' in text
    assert f'zsched_delayed_runs{{queue="{queue}"}} 0.0' in text
