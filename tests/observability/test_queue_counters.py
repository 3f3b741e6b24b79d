"""The counts the scripts keep in Redis, as every process's collector exports them.

Each test drives a real App, dispatcher and worker in process, then scrapes a fresh collector
(as a process that did none of the work would) and compares with what happened.
"""

from __future__ import annotations

from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

import zsched
from zsched import FakeClock
from zsched.observability.collector import QueueCollector
from zsched.observability.metrics import Metrics
from zsched.rules.ledger import history

NOW = 1_800_000_000_000  # a whole minute


def scrape(client, queue: str) -> CollectorRegistry:
    reg = CollectorRegistry()
    QueueCollector(client, [queue], registry=reg)
    return reg


def sample(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


async def test_enqueue_duplicates_and_worker_outcomes_are_counted_in_redis(real, queue) -> None:
    clock = FakeClock(NOW)
    app = real.app(queue, clock=clock)
    tries: Counter[str] = Counter()

    @app.task(name="ok")
    def ok(payload):
        tries["ok"] += 1

    @app.task(name="flaky")
    def flaky(payload):
        tries["flaky"] += 1
        if tries["flaky"] == 1:
            raise zsched.Retry(delay=0)

    @app.task(name="bad")
    def bad(payload):
        raise zsched.Fail("no such customer")

    @app.task(name="boom", max_attempts=1)
    def boom(payload):
        raise RuntimeError("boom")

    app.enqueue("ok", 1, run_id="a")
    assert app.enqueue("ok", 2, run_id="a").duplicate  # live
    app.enqueue("flaky", 1, run_id="f")
    app.enqueue("bad", 1, run_id="b")
    app.enqueue("boom", 1, run_id="x")
    d, w = app.dispatcher(redis=real.async_client()), app.worker(redis=real.async_client())
    try:
        await d.tick()
        await w.tick()
        assert app.enqueue("ok", 3, run_id="a").duplicate  # done within the window
        await d.tick()
        await w.tick()
    finally:
        await d.close()
        await w.close()

    reg = scrape(real.sync, queue)
    base = {"queue": queue, "partition": ""}
    assert sample(reg, "zsched_queue_runs_enqueued_total", **base) == 4
    dup = "zsched_queue_duplicates_total"
    assert sample(reg, dup, **base, kind="live", schedule="") == 1
    assert sample(reg, dup, **base, kind="done", schedule="") == 1
    assert sample(reg, "zsched_queue_runs_dispatched_total", **base) == 5  # 4 + the retry
    assert sample(reg, "zsched_queue_runs_acked_total", **base) == 2  # a, f
    assert sample(reg, "zsched_queue_runs_retried_total", **base) == 1
    dead = "zsched_queue_runs_dead_lettered_total"
    assert sample(reg, dead, **base, reason="failed") == 1
    assert sample(reg, dead, **base, reason="exhausted") == 1
    # Known reasons have a series before their first dead letter: increase() sees the first.
    assert sample(reg, dead, **base, reason="max_deliveries") == 0
    assert sample(reg, "zsched_queue_fenced_total", **base) == 0
    assert sample(reg, "zsched_queue_runs_reclaimed_total", **base) == 0


async def test_ledger_outcomes_and_rule_duplicates_are_counted_per_rule(real, queue) -> None:
    clock = FakeClock(NOW)
    app = real.app(queue, clock=clock)

    @app.task(name="t")
    def t(payload):
        pass

    app.schedule("tick", "t", every=60, misfire="skip", misfire_grace=10)
    d = app.dispatcher(redis=real.async_client())
    try:
        clock.advance(60_000)
        await d.tick()  # ran
        # The next slot's run id enqueued by hand: the fire is a duplicate.
        app.enqueue("t", None, run_id=f"tick@{zsched_slot(NOW + 120_000)}")
        clock.advance(60_000)
        await d.tick()
        clock.advance(300_000)  # an outage: the late slots are skipped (grace_passed)
        await d.tick()
    finally:
        await d.close()

    truth: Counter[tuple[str, str]] = Counter()
    for row in history(app.redis, app.keys, "tick", 1000):
        reason = row["reason"].split(":")[0].split(" ")[0] if row["outcome"] == "skipped" else ""
        truth[row["outcome"], reason] += 1
    assert {o for o, _ in truth} >= {"ran", "duplicate", "skipped"}
    reg = scrape(real.sync, queue)
    base = {"queue": queue, "partition": ""}
    for (outcome, reason), n in truth.items():
        got = sample(reg, "zsched_queue_rule_outcomes_total", **base, schedule="tick",
                     outcome=outcome, reason=reason)  # fmt: skip
        assert got == n, (outcome, reason)
    rule_dups = sample(reg, "zsched_queue_duplicates_total", **base, kind="rule_fire",
                       schedule="tick")  # fmt: skip
    assert rule_dups == truth["duplicate", ""] == 1
    # Counts that did not happen have a series at 0 from the rule's first state: increase()
    # (and the rule alerts) see the first one.
    assert sample(reg, "zsched_queue_rule_outcomes_total", **base, schedule="tick",
                  outcome="skipped", reason="catch_up_cap") == 0  # fmt: skip
    assert sample(reg, "zsched_queue_duplicates_total", **base, kind="backfill",
                  schedule="tick") == 0  # fmt: skip


def zsched_slot(ms: int) -> str:
    from zsched.rules.triggers import slot_run_id

    return slot_run_id("tick", ms).split("@", 1)[1]


def test_a_partitioned_queue_is_counted_per_partition(real, queue) -> None:
    app = zsched.App(real.sync, queue=queue, partitions=3, metrics=Metrics())
    app.enqueue_many([{"task": "t", "run_id": f"r{i}", "delay": 3600} for i in range(30)])
    app.enqueue("t", None, run_id="r0", delay=3600)
    reg = scrape(real.sync, queue)
    per = {
        str(i): sample(reg, "zsched_queue_runs_enqueued_total", queue=queue, partition=str(i))
        for i in range(3)
    }
    assert sum(v or 0 for v in per.values()) == 30
    assert all(per.values())
    home = str(app.run_partition("r0"))
    assert sample(reg, "zsched_queue_duplicates_total", queue=queue, partition=home,
                  kind="live", schedule="") == 1  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("failed after 3 attempt(s): ValueError: x", "exhausted"),
        ("failed: customer gone", "failed"),
        ("unknown task 'nope': not registered with this worker", "unknown_task"),
        ("undecodable envelope: not msgpack", "undecodable"),
        ("worker error: KeyError: 'x'", "worker_error"),
        ("delivered 4 times without an ack (max_deliveries 3)", "max_deliveries"),
        ("a reason of another client", "other"),
    ],
)
def test_the_dead_script_counts_each_reason_kind(real, queue, reason: str, kind: str) -> None:
    from zsched.protocol.keys import GROUP
    from zsched.store import scripts as S

    app = real.app(queue)
    k = app.keys
    real.sync.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    entry = real.sync.xadd(k.ready, {"run_id": "r", "envelope": b"e"}).decode()
    real.sync.xreadgroup(GROUP, "c", {k.ready: ">"})
    assert app.scripts.run(S.dead(k, "c", [(entry, "r", reason, b"e")], now_ms=None)) == [1]
    stats = {a.decode(): int(b) for a, b in real.sync.hgetall(k.stats).items()}
    assert stats == {"dead": 1, f"dead:{kind}": 1}


async def test_backfill_counts_its_duplicates_and_its_ledger_records_per_rule(real, queue) -> None:
    clock = FakeClock(NOW)
    app = real.app(queue, clock=clock)
    app.schedule("tick", "t", every=60, misfire="skip", misfire_grace=10)
    d = app.dispatcher(redis=real.async_client())
    try:
        clock.advance(60_000)
        await d.tick()
        clock.advance(240_000)  # 3 slots skipped, the last one on time
        await d.tick()
    finally:
        await d.close()
    rows = history(app.redis, app.keys, "tick", 1000)
    ran = sorted(r["slot_ms"] for r in rows if r["outcome"] == "ran")
    assert len(ran) == 2
    skipped = sorted(r["slot_ms"] for r in rows if r["outcome"] == "skipped"
                     and ran[0] < r["slot_ms"] < ran[1])  # fmt: skip
    assert len(skipped) == 3
    live = skipped[1]
    app.enqueue("t", None, run_id=f"tick@{zsched_slot(live)}", delay=3600)
    lo, hi = ran[0] / 1000, ran[-1] / 1000

    assert app.backfill("tick", lo, hi) == 2  # the two skipped slots that are not live
    reg = scrape(real.sync, queue)
    base = {"queue": queue, "partition": "", "schedule": "tick"}
    dups = "zsched_queue_duplicates_total"
    assert sample(reg, dups, **base, kind="backfill") == 3  # 2 ran + 1 live
    assert app.backfill("tick", lo, hi) == 0
    reg = scrape(real.sync, queue)
    assert sample(reg, dups, **base, kind="backfill") == 3 + 5
    assert sample(reg, "zsched_queue_rule_outcomes_total", **base, outcome="backfilled",
                  reason="") == 2  # fmt: skip
    backfilled = [
        r for r in history(app.redis, app.keys, "tick", 1000) if r["outcome"] == "backfilled"
    ]
    assert sorted(r["slot_ms"] for r in backfilled) == [skipped[0], skipped[2]]
    assert sample(reg, "zsched_queue_runs_enqueued_total", queue=queue, partition="") == 1 + 2
