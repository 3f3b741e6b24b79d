"""The Celery bridge against a real Celery 5 worker process (Redis broker on the suite's own
redis-server; one test on the machine's RabbitMQ): zsched decides when, Celery runs the task."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import redis
from celery_harness import (
    blackhole,
    celery_beat,
    celery_worker,
    env_for,
    records,
    stop,
    wait_for,
    zsched,
)
from celery_testapp import make_app, records_key, started_key

import zsched as Z
from zsched.integrations.celery import enqueue_celery, register_bridge
from zsched.observability.metrics import Metrics
from zsched.rules.triggers import slot_run_id

RABBIT = "amqp://guest:guest@127.0.0.1:5672//"


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.fixture(scope="module")
def celery_env(redis_server):
    """One Celery worker for the module, on its own Celery queue (broker: db 1)."""
    cq = "cq-" + uuid.uuid4().hex[:8]
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"
    env = env_for(broker, redis_server.url, cq)
    worker = celery_worker(env, cq)
    r = redis.Redis.from_url(redis_server.url)
    app = make_app(broker, redis_server.url, cq)
    app.send_task("proj.record", args=["warm-up"], task_id="warm-up-" + cq)
    try:
        wait_for(lambda: records(r, records_key(cq)), "the Celery worker to start", 90)
    except AssertionError:
        raise AssertionError("Celery worker did not start:\n" + stop(worker)) from None
    yield {"env": env, "queue": cq, "broker": broker, "celery": app, "r": r}
    stop(worker)
    r.close()


def ran(env, prefix: str) -> list[dict]:
    return [x for x in records(env["r"], records_key(env["queue"])) if x["id"].startswith(prefix)]


def zapp(redis_url: str, queue: str, **kw) -> Z.App:
    return Z.App(redis_url, queue=queue, metrics=Metrics(), **kw)


def test_two_dispatchers_and_a_bridge_run_each_slot_in_celery_exactly_once(
    celery_env, redis_url, queue
):
    sid = "tick-" + uuid.uuid4().hex[:6]
    app = zapp(redis_url, queue)
    # The spelling; grace 30 s so a slow CI host never makes a fire late.
    app.schedule(sid, celery_task="proj.record", every=1, misfire_grace=30,
                 celery_args=[1], celery_kwargs={"k": "v"},
                 celery_options={"priority": 3, "headers": {"x-team": "ops"}})  # fmt: skip
    env = celery_env["env"]
    procs = [zsched(env, "dispatcher", "--redis", redis_url, "--queue", queue) for _ in range(2)]
    procs.append(zsched(env, "celery-bridge", "celery_testapp:app", "--redis", redis_url,
                        "--queue", queue))  # fmt: skip
    try:
        wait_for(lambda: len(ran(celery_env, sid)) >= 5, "five slots executed in Celery")
    finally:
        outs = [stop(p) for p in procs]
    fired = {h["run_id"] for h in app.schedule_history(sid, 1000) if h["outcome"] == "ran"}
    wait_for(lambda: {x["id"] for x in ran(celery_env, sid)} >= fired, "every fire executed")
    got = ran(celery_env, sid)
    counts = Counter(x["id"] for x in got)
    assert counts and set(counts.values()) == {1}, (counts, outs)
    assert set(counts) == fired
    assert not any("Traceback" in o for o in outs), outs
    slots = sorted(_ms(i.split("@", 1)[1].replace("Z", "+00:00")) for i in counts)
    assert slots == list(range(slots[0], slots[-1] + 1, 1000))  # no slot missing between
    first = got[0]
    assert (first["args"], first["kwargs"], first["priority"]) == ([1], {"k": "v"}, 3)
    assert first["headers"] == {"x-team": "ops"}
    slot = datetime.fromisoformat(first["id"].split("@", 1)[1].replace("Z", "+00:00"))
    assert datetime.fromisoformat(first["expires"]) >= slot  # expires = slot + grace
    app.close()


def test_killed_dispatchers_catch_up_every_missed_slot_in_celery_once(celery_env, redis_url, queue):
    """Real processes on real time: both dispatchers SIGKILLed for a few slots, one started
    again; misfire=catch_up replays each missed slot, and Celery runs every slot once."""
    sid = "outage-" + uuid.uuid4().hex[:6]
    app = zapp(redis_url, queue)
    app.schedule(sid, celery_task="proj.record", every=1, misfire="catch_up", misfire_grace=1,
                 celery_options={"expires": 300})  # fmt: skip
    env = celery_env["env"]
    up = lambda: zsched(env, "dispatcher", "--redis", redis_url, "--queue", queue)  # noqa: E731
    procs = [up(), up(), zsched(env, "celery-bridge", "celery_testapp:app", "--redis",
                                redis_url, "--queue", queue)]  # fmt: skip
    now_ms = lambda: int(app.redis.time()[0]) * 1000  # noqa: E731
    try:
        wait_for(lambda: len(ran(celery_env, sid)) >= 2, "two slots before the outage")
        for p in procs[:2]:
            stop(p, kill=True)
        down = now_ms()
        wait_for(lambda: now_ms() >= down + 4000, "four slots of outage")
        procs.append(up())
        wait_for(lambda: any(h["outcome"] == "ran_late" for h in app.schedule_history(sid)),
                 "the missed slots replayed")  # fmt: skip
        back = now_ms()
        wait_for(
            lambda: (
                {h["slot_ms"] for h in app.schedule_history(sid, 1000)}
                >= set(range(down // 1000 * 1000, back // 1000 * 1000, 1000))
            ),
            "the outage's slots",
        )
    finally:
        # Dispatchers first, the bridge last: a slot fired while the bridge is already gone
        # would wait on the stream and never reach Celery (the test failed so under load).
        outs = [stop(p) for p in [*procs[:2], *procs[3:], procs[2]]]
    fired = {h["run_id"] for h in app.schedule_history(sid, 1000) if h["run_id"]}
    wait_for(lambda: {x["id"] for x in ran(celery_env, sid)} >= fired, "every fire executed")
    counts = Counter(x["id"] for x in ran(celery_env, sid))
    assert set(counts.values()) == {1} and set(counts) == fired, (counts, outs)
    slots = sorted(_ms(i.split("@", 1)[1].replace("Z", "+00:00")) for i in counts)
    assert slots == list(range(slots[0], slots[-1] + 1, 1000))  # none lost in the outage
    late = [h for h in app.schedule_history(sid, 1000) if h["outcome"] == "ran_late"]
    assert len(late) >= 2, late
    app.close()


T0 = _ms("2027-01-04T00:00:00+00:00")  # in the future: Celery checks `expires` on its clock


async def bridge_app(celery_env, redis_url, queue, clock):
    app = zapp(redis_url, queue, clock=clock)
    register_bridge(app, celery_env["celery"])
    return app, app.dispatcher(), app.worker()


async def drive(d, w) -> None:
    """Dispatch and send everything due now (catch-up replays fire one after another, each
    once the previous one is done: a few idle passes in a row say nothing is left)."""
    idle = 0
    while idle < 3:
        res = await d.tick()
        sent = await w.tick()
        idle = 0 if res.moved or sent or res.more else idle + 1


async def test_a_dispatcher_outage_follows_each_rules_misfire_policy(celery_env, redis_url, queue):
    clock = Z.FakeClock(T0)
    app, d, w = await bridge_app(celery_env, redis_url, queue, clock)
    tag = uuid.uuid4().hex[:6]
    policies = ("catch_up", "coalesce", "skip")
    for p in policies:
        app.schedule(f"{p}-{tag}", celery_task="proj.record", every=60, misfire=p,
                     misfire_grace=5)  # fmt: skip
    await drive(d, w)  # slot T0 of each rule
    clock.set(T0 + 5 * 60_000 + 30_000)  # the dispatchers were down: five slots missed
    await drive(d, w)
    catch_up = [slot_run_id(f"catch_up-{tag}", T0 + i * 60_000) for i in range(6)]
    expect = {"catch_up": 6, "coalesce": 2, "skip": 1}  # runs executed in Celery per policy
    for p in policies:
        sid = f"{p}-{tag}"
        n = expect[p]
        wait_for(lambda sid=sid, n=n: len(ran(celery_env, sid + "@")) >= n, f"{p}'s fires")
        hist = app.schedule_history(sid, 100)
        ok = ("ran", "ran_late", "coalesced")
        fired = {h["run_id"] for h in hist if h["run_id"] and h["outcome"] in ok}
        ids = Counter(x["id"] for x in ran(celery_env, sid + "@"))
        assert set(ids.values()) == {1} and set(ids) == fired and len(ids) == n, (p, ids, hist)
    assert sorted(x["id"] for x in ran(celery_env, f"catch_up-{tag}@")) == catch_up
    missed = [h for h in app.schedule_history(f"skip-{tag}") if h["outcome"] != "ran"]
    assert len(missed) == 5, missed
    await d.close()
    await w.close()
    app.close()


async def test_a_cron_rule_fires_once_on_a_dst_day(celery_env, redis_url, queue):
    """Berlin falls back on 2027-10-31: 02:30 happens twice; a fixed-time rule fires once."""
    start = _ms("2027-10-30T22:00:00+00:00")
    clock = Z.FakeClock(start)
    app, d, w = await bridge_app(celery_env, redis_url, queue, clock)
    sid = "backup-" + uuid.uuid4().hex[:6]
    app.schedule(sid, celery_task="proj.record", cron="30 2 * * *", tz="Europe/Berlin")
    for step in range(0, 28 * 3600_000, 15 * 60_000):  # to 2027-11-01T02:00Z, 15 min steps
        clock.set(start + step)
        await drive(d, w)
    want = ["2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"]  # 02:30 CEST, then 02:30 CET
    wait_for(lambda: len(ran(celery_env, sid)) >= 2, "both days' backups executed")
    assert sorted(x["id"] for x in ran(celery_env, sid)) == [f"{sid}@{t}" for t in want]
    await d.close()
    await w.close()
    app.close()


def test_a_killed_bridge_loses_no_fire(celery_env, redis_url, queue):
    app = zapp(redis_url, queue)
    tag = "lost-" + uuid.uuid4().hex[:6]
    ids = [f"{tag}-{i}" for i in range(20)]
    for rid in ids:
        enqueue_celery(app, "proj.record", [rid], run_id=rid)
    env = celery_env["env"]
    with blackhole() as port:
        # The first bridge's broker accepts and never answers: its sends hang.
        hung = {**env, "CELERY_TEST_BROKER": f"redis://127.0.0.1:{port}/0"}
        d = zsched(env, "dispatcher", "--redis", redis_url, "--queue", queue)
        b1 = zsched(hung, "celery-bridge", "celery_testapp:app", "--redis", redis_url,
                    "--queue", queue, "--concurrency", "32")  # fmt: skip
        r, procs = celery_env["r"], [d, b1]
        try:

            def held() -> int:
                try:
                    return int(r.xpending(app.keys.ready, "workers")["pending"])
                except redis.ResponseError:  # no stream or group yet
                    return 0

            try:
                wait_for(lambda: held() == 20,
                         "the first bridge to hold every fire")  # fmt: skip
            except AssertionError:
                raise AssertionError(stop(b1) + stop(d)) from None
            stop(b1, kill=True)
            procs.append(zsched(env, "celery-bridge", "celery_testapp:app", "--redis",
                                redis_url, "--queue", queue, "--visibility-timeout", "1"))  # fmt: skip
            wait_for(lambda: len(ran(celery_env, tag)) >= 20, "every fire sent by the second")
        finally:
            out = "".join(stop(p) for p in procs)
    counts = Counter(x["id"] for x in ran(celery_env, tag))
    assert sorted(counts) == sorted(ids) and set(counts.values()) == {1}, (counts, out)
    wait_for(lambda: all(app.get_run(i).state == "done" for i in ids), "every fire acked")
    app.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_overlap_holds_the_rule_until_the_celery_task_finishes(
    celery_env, redis_url, queue, overlap
):
    sid = "hold-" + uuid.uuid4().hex[:6]
    release = f"celery-test:release:{sid}"
    app = zapp(redis_url, queue)
    app.schedule(sid, celery_task="proj.hold", every=1, overlap=overlap, misfire_grace=30,
                 celery_args=[release])  # fmt: skip
    env, r = celery_env["env"], celery_env["r"]
    started = lambda: [x for x in records(r, started_key(celery_env["queue"]))  # noqa: E731
                       if x["id"].startswith(sid)]  # fmt: skip
    skips = lambda: [h for h in app.schedule_history(sid) if h["outcome"] == "skipped"]  # noqa: E731
    procs = [zsched(env, "dispatcher", "--redis", redis_url, "--queue", queue),
             zsched(env, "celery-bridge", "celery_testapp:app", "--redis", redis_url,
                    "--queue", queue)]  # fmt: skip
    try:
        wait_for(lambda: started(), "the first task to start")
        wait_for(lambda: len(skips()) >= 3, "three slots skipped while the task runs")
        assert len(started()) == 1  # the Celery worker had free threads: zsched held them
        r.set(release, 1)
        wait_for(lambda: len(started()) >= 2, "the next task after the first finished")
    finally:
        outs = [stop(p) for p in procs]
    first, second = started()[:2]
    slot = lambda x: _ms(x["id"].split("@", 1)[1].replace("Z", "+00:00"))  # noqa: E731
    between = {h["reason"] for h in skips() if slot(first) < h["slot_ms"] < slot(second)}
    if overlap == "skip":  # the next slot after the task ended runs; those during it skipped
        assert between == {f"overlap: {first['id']} still running"}
        assert slot(second) - slot(first) >= 4000, (first, second, outs)
    else:  # the slot right after waited for the first task and started when it ended
        assert slot(second) - slot(first) == 1000, (first, second, outs)
        assert between == set()


def test_the_bridge_sends_through_rabbitmq(redis_url, queue):
    import socket

    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=5).close()
    except OSError as exc:
        pytest.fail(f"this test needs the machine's RabbitMQ on 127.0.0.1:5672: {exc}")
    cq = "zsched-test-" + uuid.uuid4().hex[:8]
    env = env_for(RABBIT, redis_url, cq)
    worker = celery_worker(env, cq)
    celery = make_app(RABBIT, redis_url, cq)
    app = zapp(redis_url, queue)
    register_bridge(app, celery)
    r = redis.Redis.from_url(redis_url)
    rid = "rabbit-" + uuid.uuid4().hex[:6]
    try:
        enqueue_celery(app, "proj.record", [rid], {"via": "amqp"}, run_id=rid)
        import asyncio

        async def once() -> None:
            d, w = app.dispatcher(), app.worker()
            await drive(d, w)
            await d.close()
            await w.close()

        asyncio.run(once())
        assert app.get_run(rid).state == "done"
        got = wait_for(lambda: [x for x in records(r, records_key(cq)) if x["id"] == rid],
                       "the task executed by the worker on RabbitMQ", 90)  # fmt: skip
        assert got[0]["kwargs"] == {"via": "amqp"} and got[0]["routing_key"] == cq
    finally:
        out = stop(worker)
        with celery.connection_for_write() as conn:
            conn.default_channel.queue_delete(cq)
        r.close()
        app.close()
    assert "Traceback" not in out, out


def test_two_celery_beat_processes_with_zsched_scheduler_send_each_slot_once(
    celery_env, redis_url, queue
):
    entry = "refill-" + uuid.uuid4().hex[:6]
    env = {**celery_env["env"], "CELERY_TEST_BEAT_SECONDS": "1", "CELERY_TEST_BEAT_ENTRY": entry,
           "CELERY_TEST_ZSCHED_QUEUE": queue}  # fmt: skip
    beats = [celery_beat(env) for _ in range(2)]
    try:
        wait_for(lambda: len(ran(celery_env, entry)) >= 4, "four slots executed in Celery")
    finally:
        outs = [stop(p) for p in beats]
    app = zapp(redis_url, queue)
    fired = {h["run_id"] for h in app.schedule_history(entry, 1000) if h["run_id"]}
    wait_for(lambda: {x["id"] for x in ran(celery_env, entry)} >= fired, "every fire executed")
    counts = Counter(x["id"] for x in ran(celery_env, entry))
    assert set(counts.values()) == {1} and set(counts) == fired, (counts, outs)
    assert not any("Traceback" in o for o in outs), outs[0][-3000:]  # clean start and stop
    app.close()


def test_the_worker_hook_reports_an_expired_task_so_the_lease_is_not_held(
    celery_env, redis_url, queue
):
    """A fire that reached Celery after its expiry is revoked there: the hook still reports,
    so the rule's overlap lease is freed at once instead of after celery_wait."""
    from zsched.integrations.celery.bridge import HEADER_QUEUE, HEADER_WAIT, wait_done

    app = zapp(redis_url, queue)
    rid = "late-" + uuid.uuid4().hex[:6]
    past = datetime.now(UTC) - timedelta(minutes=5)
    celery_env["celery"].send_task("proj.record", args=[rid], task_id=rid, expires=past,
                                   headers={HEADER_QUEUE: queue, HEADER_WAIT: 1})  # fmt: skip
    assert wait_done(app, rid, 60) == "EXPIRED"
    assert ran(celery_env, rid) == []
    app.close()
