"""Partitioned queues on one server: routing by run id, the recorded partition count, views,
inspection across partitions, and fair service of every partition."""

from __future__ import annotations

import asyncio
import zlib

import pytest

import zsched
from tests.state import delayed_due
from zsched.errors import ConfigError
from zsched.protocol.keys import QueueKeys, partitions_key
from zsched.store import partitions as P


def ids_in(app: zsched.App, part: int, n: int, prefix: str) -> list[str]:
    """`n` run ids that route to partition `part`."""
    out, i = [], 0
    while len(out) < n:
        rid = f"{prefix}{i}"
        if app.run_partition(rid) == part:
            out.append(rid)
        i += 1
    return out


def test_routing_is_crc32_of_the_id_and_a_fire_lands_with_its_rule() -> None:
    assert P.run_partition("r1", 8) == zlib.crc32(b"r1") % 8
    assert P.partition_for("nightly", 8) == zlib.crc32(b"nightly") % 8
    # A fire's run id is `<schedule_id>@<slot>`: it routes by the schedule id, also when the
    # schedule id itself contains an '@'.
    for sid in ("nightly", "mail@home", "a"):
        for slot in ("2026-03-29T02:30:00+00:00", "2026-11-01T05:30:00+00:00"):
            assert P.run_partition(f"{sid}@{slot}", 8) == P.partition_for(sid, 8)
    assert P.run_partition("@odd", 8) == P.partition_for("@odd", 8)
    assert P.run_partition("anything", 1) == 0
    spread = {P.run_partition(f"run-{i}", 8) for i in range(200)}
    assert spread == set(range(8))


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.5, "8", True])
def test_a_bad_partition_count_is_refused(bad: object, redis_url: str) -> None:
    with pytest.raises(ConfigError, match="partitions"):
        zsched.App(redis_url, queue="q", partitions=bad)  # type: ignore[arg-type]


def test_each_run_is_stored_under_the_tag_of_its_partition(backend, queue) -> None:
    app = backend.app(queue, partitions=4)
    ids = [f"r{i}" for i in range(40)]
    app.enqueue_many([{"task": "t", "run_id": i} for i in ids])
    app.enqueue("t", run_id="single")
    r = backend.sync
    for rid in [*ids, "single"]:
        k = QueueKeys(queue, app.run_partition(rid))
        assert delayed_due(r, k, rid) is not None and r.hexists(k.runs, rid)
        assert not r.hexists(QueueKeys(queue).runs, rid)
    assert all(s.delayed > 0 for s in app.partition_statuses())
    assert app.status().delayed == 41
    assert r.get(partitions_key(queue)) == b"4"


def test_dedupe_stays_exact_across_partitions_and_apps(backend, queue) -> None:
    app = backend.app(queue, partitions=8)
    first = app.enqueue("t", run_id="same")
    again = app.enqueue_many([{"task": "t", "run_id": "same"}, {"task": "t", "run_id": "x"}])
    other = backend.app(queue, partitions=8).enqueue("t", run_id="same")
    view = app.partition_view((app.run_partition("same") + 1) % 8).enqueue("t", run_id="same")
    assert not first.duplicate and again[0].duplicate and not again[1].duplicate
    assert other.duplicate and view.duplicate
    assert app.status().delayed == 2


def test_get_run_and_cancel_find_a_run_in_its_partition(backend, queue) -> None:
    app = backend.app(queue, partitions=4)
    app.enqueue("t", run_id="later", delay=3600)
    assert app.get_run("later").state == "scheduled"
    assert app.cancel("later")
    assert app.get_run("later").state == "cancelled"  # recorded in the run's partition
    with pytest.raises(zsched.RunNotFound):
        app.get_run("never")


def test_an_app_with_another_partition_count_is_refused(backend, queue) -> None:
    backend.app(queue, partitions=4).enqueue("t")
    with pytest.raises(ConfigError, match="recorded in Redis with 4 partition"):
        backend.app(queue, partitions=2).enqueue("t")
    with pytest.raises(ConfigError, match="recorded in Redis with 4 partition"):
        backend.app(queue).enqueue("t")
    assert backend.app(queue, partitions="auto").partitions == 4
    assert backend.app(queue + "-new", partitions="auto").partitions == 1


def test_splitting_a_queue_that_holds_live_runs_is_refused(backend, queue) -> None:
    backend.app(queue).enqueue("t", run_id="old")
    with pytest.raises(ConfigError, match="drain it"):
        backend.app(queue, partitions=4).enqueue("t")
    assert backend.sync.get(partitions_key(queue)) is None  # nothing half-recorded


def test_a_drained_queue_can_be_split_again(backend, queue) -> None:
    app = backend.app(queue, partitions=4)
    app.enqueue("t", run_id="live", delay=60)
    with pytest.raises(ConfigError, match="not drained"):
        P.reset_layout(app.ctx)
    assert app.cancel("live")
    P.reset_layout(app.ctx)
    assert not backend.app(queue, partitions=2).enqueue("t").duplicate
    assert P.stored_count(backend.sync, queue) == 2


def test_views_share_everything_but_the_keys(backend, queue) -> None:
    app = backend.app(queue, partitions=3)

    @app.task(name="t")
    def t(payload: object) -> None: ...

    views = app.partition_views()
    assert [v.keys.tag for v in views] == [f"{{{queue}#{i}}}" for i in range(3)]
    assert all(v.tasks is app.tasks and v.redis is app.redis for v in views)
    assert app.partition_view(2) is views[2]
    with pytest.raises(ValueError, match="view already"):
        views[0].partition_views()
    assert zsched.App(backend.sync, queue=queue + "-1").partition_views()[0].partition is None


async def test_every_partition_is_dispatched_and_worked(backend, queue) -> None:
    app = backend.app(queue, partitions=4)
    done: list[str] = []

    @app.task(name="t")
    async def t(payload: dict[str, str]) -> None:
        done.append(payload["id"])

    ids = [f"r{i}" for i in range(120)]
    app.enqueue_many([{"task": "t", "run_id": i, "payload": {"id": i}} for i in ids])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client(), concurrency=8)
    try:
        results = await d.tick()
        assert sum(r.moved for r in results) == 120 and len(results) == 4
        assert await w.tick() == 120
    finally:
        await d.close()
        await w.close()
    assert sorted(done) == sorted(ids)
    st = app.status()
    assert st.stats["acked"] == 120 and st.delayed == st.stream_length == 0


async def test_failed_runs_of_every_partition_show_up_in_the_dead_letters(backend, queue) -> None:
    app = backend.app(queue, partitions=4)

    @app.task(name="bad")
    def bad(payload: object) -> None:
        raise zsched.Fail("no")

    ids = [f"d{i}" for i in range(12)]
    app.enqueue_many([{"task": "bad", "run_id": i} for i in ids])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        await d.tick()
        await w.tick()
    finally:
        await d.close()
        await w.close()
    letters = app.dead_letters()
    assert sorted(x.run_id for x in letters) == sorted(ids)
    assert len({app.run_partition(x.run_id) for x in letters}) > 1
    # Stream ids repeat across partitions: dead letters name theirs as `<partition>:<id>`.
    assert all(x.entry_id.split(":")[0] == str(app.run_partition(x.run_id)) for x in letters)
    first, second = letters[0], letters[1]
    assert app.replay_dead([first.entry_id, "0:0-1"]) == {
        "replayed": 1, "missing": 1, "live": 0, "undecodable": 0}  # fmt: skip
    assert app.get_run(first.run_id).state == "scheduled"
    assert app.purge_dead([second.entry_id]) == 1
    assert app.purge_dead() == 10 and app.dead_letters() == []


async def test_a_busy_partition_does_not_starve_a_quiet_one(real, queue) -> None:
    """10,000 runs due in one partition, 10 in another: the 10 finish long before the 10,000."""
    app = real.app(queue, partitions=2)
    busy, quiet = ids_in(app, 0, 10_000, "b"), ids_in(app, 1, 10, "q")
    order: list[str] = []
    quiet_done = asyncio.Event()

    @app.task(name="t")
    async def t(payload: None) -> None:
        run = zsched.current_run()
        order.append(run.run_id)
        if sum(1 for r in order if r.startswith("q")) == len(quiet):
            quiet_done.set()
        await asyncio.sleep(0)

    # The busy partition's runs are older, so any first-come order would serve them first.
    app.enqueue_many([{"task": "t", "run_id": i, "run_at": 1} for i in busy])
    app.enqueue_many([{"task": "t", "run_id": i} for i in quiet])
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client(), concurrency=8)
    stop = asyncio.Event()
    loops = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    try:
        await asyncio.wait_for(quiet_done.wait(), 60)
    finally:
        stop.set()
        await asyncio.gather(*loops)
        await d.close()
        await w.close()
    served_busy = sum(1 for r in order[: order.index(quiet[-1]) + 1] if r.startswith("b"))
    # First come, first served would run all 10,000 first; each partition's own share runs
    # the quiet ones at once (how many busy ones slip in between depends on scheduling).
    assert served_busy < len(busy) // 10, served_busy


def test_declared_rules_are_split_over_the_partitions(backend, queue) -> None:
    """Each partition's dispatcher syncs only the rules that live in it, so no rule fires in
    two partitions."""
    app = backend.app(queue, partitions=4)
    for i in range(20):
        app.declared[f"rule-{i}"] = {"task": "t", "every": 60}
    parts = [set(v.declared) for v in app.partition_views()]
    assert set().union(*parts) == set(app.declared) and sum(map(len, parts)) == 20
    assert all(app.partition_for(s) == i for i, p in enumerate(parts) for s in p)
