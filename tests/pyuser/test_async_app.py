"""zsched.AsyncApp: the same calls give the same Redis state as App's, and never stall the loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from state import snapshot

import zsched
import zsched.runs.enqueue
from zsched import FakeClock
from zsched.observability.metrics import Metrics

NOW = 1_800_000_000_000


def _rule_state(r: Any, app: zsched.App, sid: str) -> dict[str, Any]:
    k = app.keys
    ledger = [{a: b for a, b in f.items() if a != b"at_ms"} for _, f in r.xrange(k.ledger(sid))]
    return {
        "spec": r.hget(k.rules, sid),
        "state": r.hget(k.rule_state, sid),
        "next": r.zscore(k.rule_next, sid),
        "ledger": ledger,
    }


def _calls(payload_of: Any) -> list[dict[str, Any]]:
    at = datetime(2027, 1, 15, 12, tzinfo=UTC)
    items: list[dict[str, Any]] = [
        {"task": "t", "payload": payload_of(i), "run_id": f"r{i}", "delay": i % 7 * 60}
        for i in range(250)
    ]
    items.append({"task": "t", "payload": None, "run_id": "r3"})  # a duplicate in the batch
    items.append({"task": "t", "payload": [1, 2], "run_id": "fixed", "run_at": at})
    return items


async def _drive_sync(app: zsched.App) -> list[Any]:
    out: list[Any] = []
    out.append(app.enqueue("t", {"a": 1}, delay=timedelta(minutes=5), run_id="one"))
    out.append(app.enqueue("t", {"a": 1}, delay=5, run_id="one"))  # duplicate
    out.append(app.enqueue_many(_calls(lambda i: {"i": i})))
    out.append((app.cancel("r5"), app.cancel("r5"), app.cancel("nope")))
    out.append(app.schedule("nightly", "t", cron=zsched.Cron("0 3 * * *", "Europe/Berlin")))
    out.append(app.schedule("often", "t", every=timedelta(minutes=10), overlap="skip"))
    out.append(app.pause_schedule("often"))
    out.append(app.resume_schedule("often"))
    out.append(app.backfill("nightly", NOW / 1000 - 3 * 86400, NOW / 1000))
    out.append(app.unschedule("often"))
    out.append([vars(s) for s in app.schedules()])
    out.append(app.schedule_history("nightly"))
    out.append(vars(app.get_run("one")))
    out.append(vars(app.get_run("fixed")))
    st = app.status().as_dict()
    st.pop("queue"), st.pop("now_ms")  # status reads the server TIME
    out.append(st)
    out.extend(_controls_sync(app))
    return out


def _ids(ids: Any) -> Any:
    """What an EnqueuedId says (str equality alone would hide its flags)."""
    if isinstance(ids, list):
        return [_ids(i) for i in ids]
    return (str(ids), ids.duplicate, ids.replaced, ids.outcome)


def _conflict_items() -> list[dict[str, Any]]:
    return [
        {"task": "t", "payload": "new", "run_id": "r10", "delay": 30, "on_conflict": "replace"},
        {"task": "t", "payload": "deb", "run_id": "r11", "delay": 90,
         "on_conflict": "debounce", "max_delay": 600},
        {"task": "t", "payload": "plain", "run_id": "r12"},  # keep: a duplicate
        {"task": "t", "payload": "fresh", "run_id": "c1", "on_conflict": "replace", "delay": 1},
    ]  # fmt: skip


def _controls_sync(app: zsched.App) -> list[Any]:
    at = datetime(2027, 2, 1, 9, tzinfo=UTC)
    return [
        app.reschedule("one", run_at=at),
        app.reschedule("r20", delay=timedelta(hours=2)),
        app.reschedule("nope", delay=5),
        _ids(app.enqueue("t", {"b": 2}, run_id="one", delay=60, on_conflict="replace")),
        _ids(
            app.enqueue(
                "t",
                {"b": 3},
                run_id="r21",
                delay=120,
                on_conflict="debounce",
                max_delay=timedelta(minutes=30),
            )
        ),  # fmt: skip
        _ids(app.enqueue("t", {"b": 4}, run_id="r5", delay=1, on_conflict="replace")),
        _ids(app.enqueue_many(_conflict_items())),
        app.pause_queue(note="deploy 42"),
        app.pause_queue(),
        app.resume_queue(),
        app.resume_queue(),
        app.pause_schedule("nightly", note="maintenance"),
        app.run_schedule_now("nightly").as_dict(),
        app.run_schedule_now("nightly", force=True).as_dict(),
        [vars(s) for s in app.schedules()],
        app.cancel("nightly@manual:2027-01-15T08:00:00Z"),
        vars(app.get_run("nightly@manual:2027-01-15T08:00:00Z")),  # cancelled: finished_at
        vars(app.get_run("one")),
        app.drain(timeout=5, poll=0.01),  # nothing on the stream: drained at once, paused
        (app.status().paused, app.status().pause_note),
    ]


async def _controls_async(app: zsched.AsyncApp) -> list[Any]:
    at = datetime(2027, 2, 1, 9, tzinfo=UTC)
    return [
        await app.reschedule("one", run_at=at),
        await app.reschedule("r20", delay=timedelta(hours=2)),
        await app.reschedule("nope", delay=5),
        _ids(await app.enqueue("t", {"b": 2}, run_id="one", delay=60, on_conflict="replace")),
        _ids(
            await app.enqueue(
                "t",
                {"b": 3},
                run_id="r21",
                delay=120,
                on_conflict="debounce",
                max_delay=timedelta(minutes=30),
            )
        ),  # fmt: skip
        _ids(await app.enqueue("t", {"b": 4}, run_id="r5", delay=1, on_conflict="replace")),
        _ids(await app.enqueue_many(_conflict_items())),
        await app.pause_queue(note="deploy 42"),
        await app.pause_queue(),
        await app.resume_queue(),
        await app.resume_queue(),
        await app.pause_schedule("nightly", note="maintenance"),
        (await app.run_schedule_now("nightly")).as_dict(),
        (await app.run_schedule_now("nightly", force=True)).as_dict(),
        [vars(s) for s in await app.schedules()],
        await app.cancel("nightly@manual:2027-01-15T08:00:00Z"),
        vars(await app.get_run("nightly@manual:2027-01-15T08:00:00Z")),
        vars(await app.get_run("one")),
        await app.drain(timeout=5, poll=0.01),
        ((await app.status()).paused, (await app.status()).pause_note),
    ]


async def _drive_async(app: zsched.AsyncApp) -> list[Any]:
    out: list[Any] = []
    out.append(await app.enqueue("t", {"a": 1}, delay=timedelta(minutes=5), run_id="one"))
    out.append(await app.enqueue("t", {"a": 1}, delay=5, run_id="one"))
    out.append(await app.enqueue_many(_calls(lambda i: {"i": i})))
    out.append((await app.cancel("r5"), await app.cancel("r5"), await app.cancel("nope")))
    out.append(await app.schedule("nightly", "t", cron=zsched.Cron("0 3 * * *", "Europe/Berlin")))
    out.append(await app.schedule("often", "t", every=timedelta(minutes=10), overlap="skip"))
    out.append(await app.pause_schedule("often"))
    out.append(await app.resume_schedule("often"))
    out.append(await app.backfill("nightly", NOW / 1000 - 3 * 86400, NOW / 1000))
    out.append(await app.unschedule("often"))
    out.append([vars(s) for s in await app.schedules()])
    out.append(await app.schedule_history("nightly"))
    out.append(vars(await app.get_run("one")))
    out.append(vars(await app.get_run("fixed")))
    st = (await app.status()).as_dict()
    st.pop("queue"), st.pop("now_ms")  # status reads the server TIME
    out.append(st)
    out.extend(await _controls_async(app))
    return out


def _no_at_ms(results: list[Any]) -> list[Any]:
    history = results[11]
    results[11] = [{k: v for k, v in row.items() if k != "at_ms"} for row in history]
    return results


async def test_async_and_sync_calls_leave_identical_redis_state(backend, queue) -> None:
    sync_app = backend.app(queue + "-s", clock=FakeClock(NOW))
    async_app = zsched.AsyncApp(backend.sync, queue + "-a", clock=FakeClock(NOW), metrics=Metrics())
    if backend.name == "fake":  # the asyncio client must reach the same fake server
        async_app = zsched.AsyncApp.from_app(async_app.app, backend.async_client())
    sync_results = _no_at_ms(await _drive_sync(sync_app))
    async_results = _no_at_ms(await _drive_async(async_app))
    assert async_results == sync_results
    assert [bool(c) for c in async_results[3]] == [True, False, False]  # cancel, again, unknown
    outcomes = [c.outcome.name for c in async_results[3]]
    assert outcomes == ["CANCELLED_DELAYED", "ALREADY_CANCELLED", "NOT_FOUND"]
    ctl = async_results[15:]  # the run controls (_controls_async)
    assert [r.outcome.name for r in ctl[:3]] == ["MOVED", "MOVED", "NOT_FOUND"]
    assert [x[3].value for x in ctl[3:6]] == ["replaced", "debounced", "enqueued"]
    assert [x[3].value for x in ctl[6]] == ["replaced", "debounced", "duplicate", "enqueued"]
    assert ctl[7:11] == [True, False, True, False]  # pause, again, resume, again
    assert ctl[12]["outcome"] == "started" and ctl[13]["outcome"] == "duplicate"
    assert ctl[14][0]["pause_note"] == "maintenance" and ctl[15].cancelled
    assert ctl[16]["state"] == "cancelled" and ctl[16]["finished_at"] is not None
    assert ctl[18] is True and ctl[19] == (True, "drain")  # drained, and left paused
    assert [r.duplicate for r in async_results[2]][-2:] == [True, False]
    r = backend.sync
    assert snapshot(r, async_app.keys) == snapshot(r, sync_app.keys)
    assert snapshot(r, sync_app.keys)["runs"]  # the comparison saw runs
    for sid in ("nightly", "often"):
        assert _rule_state(r, async_app.app, sid) == _rule_state(r, sync_app, sid)
    assert _rule_state(r, sync_app, "nightly")["ledger"]  # backfill wrote the ledger
    enqueued = sync_app.metrics.enqueued.labels(sync_app.queue)._value.get()
    assert async_app.metrics.enqueued.labels(async_app.queue)._value.get() == enqueued
    client = async_app.redis
    await async_app.aclose()
    await client.aclose()  # a client given to AsyncApp stays the caller's to close


async def test_dead_letters_read_replay_and_purge_like_the_app(backend, queue) -> None:
    clock = FakeClock(NOW)
    app = backend.app(queue, clock=clock)
    aio = app.aio(backend.async_client())

    @app.task(name="boom")
    def boom(payload: Any) -> None:
        raise zsched.Fail("no good")

    await aio.enqueue_many([("boom", i) for i in range(3)])
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    assert await w.tick() == 3
    sync_view = [d.as_dict() for d in app.dead_letters()]
    assert [d.as_dict() for d in await aio.dead_letters()] == sync_view
    assert {d["reason"] for d in sync_view} == {"failed: no good"}
    dead_run = sync_view[0]["run_id"]
    assert vars(await aio.get_run(dead_run)) == vars(app.get_run(dead_run))
    assert (await aio.get_run(dead_run)).state == "dead"
    assert await aio.replay_dead([sync_view[0]["entry_id"]]) == {
        "replayed": 1, "missing": 0, "live": 0, "undecodable": 0,
    }  # fmt: skip
    assert await aio.purge_dead() == 2
    assert app.dead_letters() == []
    with pytest.raises(zsched.RunNotFound):
        await aio.get_run("never")
    await d.close()
    await w.close()
    await aio.aclose()
    assert await aio.redis.ping()  # the client it was given is still open: the caller's
    await aio.redis.aclose()


async def test_a_partitioned_queue_routes_async_runs_like_the_app(real, queue) -> None:
    sync_app = real.app(queue + "-s", clock=FakeClock(NOW), partitions=3)
    aio = zsched.AsyncApp(real.url, queue + "-a", clock=FakeClock(NOW), partitions=3)
    items = [("t", i, NOW / 1000 + i) for i in range(400)]
    ids = [f"p{i}" for i in range(400)]
    sync_app.enqueue_many([{"task": t, "payload": p, "run_at": at, "run_id": rid}
                           for (t, p, at), rid in zip(items, ids, strict=True)])  # fmt: skip
    await aio.enqueue_many([{"task": t, "payload": p, "run_at": at, "run_id": rid}
                            for (t, p, at), rid in zip(items, ids, strict=True)])  # fmt: skip
    for i in range(3):
        a, s = aio.app.partition_view(i).keys, sync_app.partition_view(i).keys
        assert snapshot(real.sync, a) == snapshot(real.sync, s)
        assert snapshot(real.sync, a)["runs"]  # every partition got runs
    parts = [p.delayed for p in await aio.partition_statuses()]
    assert parts == [p.delayed for p in sync_app.partition_statuses()] and sum(parts) == 400
    assert (await aio.status()).delayed == 400
    assert await aio.cancel("p7") and (await aio.get_run("p8")).state == "scheduled"
    with pytest.raises(zsched.ConfigError, match="recorded in Redis with 3"):
        await zsched.AsyncApp(real.url, queue + "-a", partitions=2).enqueue("t")
    await aio.aclose()


async def test_a_durable_async_enqueue_without_a_replica_raises_not_replicated(real, queue):
    # Ridden through for outage_retry_ms, as App does (a failover's new master may have no
    # replica for a moment), then raised.
    aio = zsched.AsyncApp(real.url, queue, durable=True, durable_timeout=0.05,
                          settings=zsched.QueueSettings(outage_retry_ms=300))  # fmt: skip
    with pytest.raises(zsched.NotReplicated, match="enqueue in queue"):
        await aio.enqueue("t", run_id="d1")
    with pytest.raises(zsched.NotReplicated):
        await aio.enqueue_many([("t", i) for i in range(150)])
    with pytest.raises(zsched.NotReplicated):  # replace.lua's call is followed by WAIT too
        await aio.enqueue("t", 2, run_id="d1", delay=5, on_conflict="replace")
    assert (await aio.get_run("d1")).state == "scheduled"  # written on the master, as App does
    await aio.aclose()


class LoopProbe:
    """A coroutine that yields (sleep(0)) in a loop and notes, each time the loop runs it, how
    many runs `progress()` says were validated so far: a stall shows up as a range of progress
    during which the probe never ran, whatever the machine's speed or load."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.seen: list[int] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            self.seen.append(self.progress())
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopProbe:
        self._task = asyncio.create_task(self.run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await self._task


async def test_enqueueing_10000_runs_from_a_coroutine_keeps_the_loop_turning(
    real, queue, monkeypatch
):
    aio = zsched.AsyncApp(real.url, queue)
    blocking = zsched.App(real.url, queue + "-sync")
    built = [0]
    real_build = zsched.runs.enqueue.build  # every run of both Apps is checked and packed here

    def counting(*a: Any, **kw: Any) -> Any:
        built[0] += 1
        return real_build(*a, **kw)

    monkeypatch.setattr(zsched.runs.enqueue, "build", counting)
    items = [("t", {"n": i}) for i in range(10_000)]
    async with LoopProbe(lambda: built[0]) as probe:
        ids = await aio.enqueue_many(items)
        async_seen = list(probe.seen)
        for i in range(500):
            await aio.enqueue("t", i)
        singles_seen = list(probe.seen[len(async_seen) :])
        before = len(probe.seen)
        blocking.enqueue_many(items)  # the sync App on the loop: the stall the probe must see
        blocking_ticks = len(probe.seen) - before
    assert len(ids) == 10_000 and (await aio.status()).delayed == 10_500
    # The loop ran the probe inside every slice of BUILD_SLICE runs being validated (a slice
    # with no tick would be a stall of at least that slice), again after validation (the round
    # trips), and between the 500 single enqueues; while the sync App worked, never.
    slice_ = zsched.aio.BUILD_SLICE
    slices_seen = {(n - 1) // slice_ for n in async_seen if 0 < n <= 10_000}
    assert slices_seen == set(range(10_000 // slice_))
    trips = 10_000 // zsched.app.ENQUEUE_BATCH // zsched.aio.CALLS_PER_TRIP
    assert async_seen.count(10_000) >= trips
    assert len(set(singles_seen)) >= 500
    assert blocking_ticks == 0
    blocking.close()
    await aio.aclose()


async def test_an_asyncio_client_of_one_server_is_accepted_and_left_open(real, queue) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(real.url, protocol=2)
    aio = zsched.AsyncApp(client, queue)
    assert aio.redis is client
    await aio.enqueue("t", run_id="c1")
    assert await aio.schedule("r", "t", every=60) == 1  # the sync twin, in a thread
    assert [i.schedule_id for i in await aio.schedules()] == ["r"]
    await aio.aclose()
    assert (await client.ping()) is True
    await client.aclose()


async def test_an_asyncio_cluster_client_is_refused_naming_the_url_form() -> None:
    import redis.asyncio.cluster as aiocluster

    client = aiocluster.RedisCluster(host="127.0.0.1", port=1)
    with pytest.raises(zsched.ConfigError, match="pass the URL"):
        zsched.AsyncApp(client, "q")
    await client.aclose()


async def test_get_run_reads_outcomes_cancel_requests_and_limit_waits_like_the_app(backend, queue):
    app = backend.app(queue, clock=FakeClock(NOW))
    aio = app.aio(backend.async_client())

    @app.task(name="kept", keep_result=True)
    def kept(payload: Any) -> dict[str, Any]:
        return {"got": payload}

    await aio.enqueue("kept", 7, run_id="k1")
    await aio.enqueue("t", None, run_id="limited", delay=60)
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    await d.tick()
    assert await w.tick() == 1  # k1 ran and its outcome is kept
    await aio.enqueue("t", None, run_id="run1")
    await d.tick()
    r = backend.sync
    # run1 is read by a consumer and not acked: running; cancel asks it to stop.
    r.xreadgroup(zsched.protocol.keys.GROUP, "c1", {app.keys.ready: ">"}, count=10)
    done_id, running_id = "k1", "run1"
    asked = await aio.cancel(running_id)
    assert asked.requested and not asked
    # A run deferred by its task's limits sits in the task's waiting set (acquire.lua).
    r.zadd(app.keys.limit_waiting("t"), {"limited": NOW})
    for rid in (done_id, running_id, "limited"):
        # idle_ms of a running run is read live (the server's clock): equal but for it
        got, want = vars(await aio.get_run(rid)), vars(app.get_run(rid))
        assert isinstance(got.pop("idle_ms"), type(want.pop("idle_ms"))), rid
        assert got == want, rid
    assert (await aio.get_run(running_id)).cancel_requested is True
    assert (await aio.get_run("limited")).waiting_for_limit == "t"
    finished = await aio.get_run(done_id)
    assert finished.state == "done" and finished.finished_at is not None
    assert finished.attempts == 1 and finished.result == {"got": 7}
    await d.close()
    await w.close()
    client = aio.redis
    await aio.aclose()
    await client.aclose()


async def test_drain_awaits_the_stream_without_holding_the_loop(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    aio = app.aio(backend.async_client())
    ran: list[int] = []

    @app.task(name="job")
    def job(payload: int) -> None:
        ran.append(payload)

    await aio.enqueue_many([("job", i) for i in range(3)])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    await d.tick()
    assert (await aio.status()).stream_length == 3
    seen: list[Any] = []
    draining = asyncio.create_task(aio.drain(timeout=30, progress=seen.append, poll=0.01))
    while not seen:  # the first poll: the queue is paused, the stream still full
        await asyncio.sleep(0)
    assert not draining.done() and seen[0].stream_length == 3 and seen[0].paused
    assert await w.tick() == 3  # the worker runs on the same loop while drain waits
    assert await draining is True
    assert sorted(ran) == [0, 1, 2] and (await aio.status()).paused
    await aio.enqueue("job", 9, run_id="after")
    await d.tick()  # paused: nothing moves onto the stream
    assert (await aio.status()).stream_length == 0
    assert await aio.resume_queue() is True
    await d.tick()
    assert (await aio.status()).stream_length == 1
    assert await aio.drain(timeout=0, poll=0.01) is False  # timed out: one run still ready
    await d.close()
    await w.close()
    client = aio.redis
    await aio.aclose()
    await client.aclose()


async def test_a_celery_rule_is_scheduled_through_asyncapp_as_through_the_app(backend, queue):
    sync_app = backend.app(queue + "-s", clock=FakeClock(NOW))
    aio = backend.app(queue + "-a", clock=FakeClock(NOW)).aio(backend.async_client())
    opts = {"celery_task": "proj.add", "every": 60, "celery_args": [1, 2],
            "celery_options": {"queue": "math"}}  # fmt: skip
    assert sync_app.schedule("adder", **opts) == aio.app.schedule("other", "t", every=60) == 1
    assert await aio.schedule("adder", **opts) == 1
    r = backend.sync
    assert _rule_state(r, aio.app, "adder") == _rule_state(r, sync_app, "adder")
    (rule,) = [i for i in await aio.schedules() if i.schedule_id == "adder"]
    assert rule.task == "zsched.celery.send"  # the bridge's task: each fire goes to Celery
    with pytest.raises(ValueError, match="not both"):
        await aio.schedule("x", "t", celery_task="proj.add", every=60)
    aio.declare("beat", celery_task="proj.add", every=60)
    assert aio.app.declared["beat"]["task"] == "zsched.celery.send"
    client = aio.redis
    await aio.aclose()
    await client.aclose()
