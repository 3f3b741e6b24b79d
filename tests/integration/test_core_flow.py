"""Dispatcher and worker together, in process, on redis-server and fakeredis."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from state import delayed_due, envelope_of, places, snapshot

import zsched
from zsched import FakeClock
from zsched.protocol.keys import GROUP

NOW = 1_800_000_000_000


def make(backend, queue, clock=None, **kw):
    app = backend.app(queue, clock=clock, **kw)
    return app


async def test_a_delayed_run_is_dispatched_and_executed_with_its_identity(backend, queue) -> None:
    clock = FakeClock(NOW)
    app = make(backend, queue, clock)
    seen = []

    @app.task(name="remind")
    async def remind(payload):
        r = zsched.current_run()
        seen.append((payload, r.run_id, r.attempt, r.scheduled_for.timestamp(), r.task))

    app.enqueue("remind", {"learner": 7}, delay=60, run_id="class-1:learner-7")
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    assert (await d.tick()).moved == 0
    assert app.get_run("class-1:learner-7").state == "scheduled"
    clock.advance(60_000)
    assert (await d.tick()).moved == 1
    assert app.get_run("class-1:learner-7").state == "ready"
    assert await w.tick() == 1
    assert seen == [({"learner": 7}, "class-1:learner-7", 1, (NOW + 60_000) / 1000, "remind")]
    assert app.get_run("class-1:learner-7").state == "done"
    assert places(backend.sync, app.keys, "class-1:learner-7") == ["done"]
    await d.close()
    await w.close()


async def test_duplicates_are_counted_and_run_once(backend, queue) -> None:
    app = make(backend, queue)
    ran = []

    @app.task(name="t")
    def t(payload):
        ran.append(payload)

    first = app.enqueue("t", 1, run_id="same")
    second = app.enqueue("t", 2, run_id="same")
    assert (first, first.duplicate, second, second.duplicate) == ("same", False, "same", True)
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    third = app.enqueue("t", 3, run_id="same")  # done within the dedupe window
    assert third.duplicate
    await d.tick()
    await w.tick()
    assert ran == [1]
    assert app.status().stats["duplicate"] == 2
    assert app.metrics.duplicates.labels(queue, "enqueue")._value.get() == 2
    await d.close()
    await w.close()


async def test_retry_backs_off_exponentially_then_succeeds(backend, queue) -> None:
    clock = FakeClock(NOW)
    app = make(backend, queue, clock)
    attempts = []

    @app.task(name="flaky", max_attempts=3, backoff=10.0)
    def flaky(payload):
        attempts.append(zsched.current_run().attempt)
        if len(attempts) < 3:
            raise ConnectionError("upstream down")

    app.enqueue("flaky", None, run_id="f")
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    for expected_cap in (10_000, 20_000):
        await d.tick()
        await w.tick()
        due = delayed_due(backend.sync, app.keys, "f")
        assert due is not None, "the failed run went back to the delayed set"
        delay = due - clock.now_ms()
        assert expected_cap / 2 <= delay <= expected_cap
        clock.set(int(due))
    await d.tick()
    await w.tick()
    assert attempts == [1, 2, 3]
    assert app.get_run("f").state == "done"
    await d.close()
    await w.close()


@pytest.mark.parametrize(
    ("delay", "expected_ms"),
    [(5, 5_000), (1e15, 1000 * 365.25 * 86_400_000), (float("inf"), None), (-1, None)],
)
async def test_a_handler_asks_for_a_retry_with_its_own_delay(backend, queue, delay, expected_ms):
    """Retry(delay=s) puts the run back due s seconds later, whatever the backoff; a delay past
    what the scripts accept (the year 9999) is cut to 1000 years rather than refused (a refused
    retry call would leave the run pending, retried the same way after each reclaim); one that
    is not finite seconds >= 0 is the handler's error: an ordinary failure, retried by backoff."""
    clock = FakeClock(NOW)
    app = make(backend, queue, clock)

    @app.task(name="later", max_attempts=3, backoff=1.0)
    def later(payload):
        raise zsched.Retry(delay=delay, reason="not yet")

    app.enqueue("later", None, run_id="r")
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    due = delayed_due(backend.sync, app.keys, "r")
    assert due is not None, "the run went back to the delayed set"
    if expected_ms is not None:
        assert due - NOW == int(expected_ms)
    else:
        assert 500 <= due - NOW <= 1000  # the task's backoff: 1 s with jitter
    await d.close()
    await w.close()


async def test_a_fault_of_the_worker_itself_dead_letters_the_run_and_the_worker_goes_on(
    backend, queue, monkeypatch
):
    """Not a handler's error (those are outcomes) but the worker's own, before any outcome:
    the run goes to the dead letters with the exception, not left pending until reclaim."""
    import zsched.worker.runner

    app = make(backend, queue)
    ran = []

    @app.task(name="t")
    def t(payload):
        ran.append(payload)

    real = zsched.worker.runner.run_info

    def broken(run_id, *args):
        if run_id == "bad":
            raise RuntimeError("simulated worker bug")
        return real(run_id, *args)

    monkeypatch.setattr(zsched.worker.runner, "run_info", broken)
    app.enqueue("t", 1, run_id="bad")
    app.enqueue("t", 2, run_id="good")
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    assert ran == [2]
    (letter,) = app.dead_letters()
    assert (letter.run_id, letter.reason) == (
        "bad",
        "worker error: RuntimeError: simulated worker bug",
    )
    assert app.get_run("good").state == "done"
    assert app.metrics.dead_lettered.labels(queue, "worker_error")._value.get() == 1
    await d.close()
    await w.close()


async def test_exhausted_failed_unknown_and_undecodable_runs_go_to_dead_letters(backend, queue):
    app = make(backend, queue)
    good = []

    @app.task(name="broken", max_attempts=1)
    def broken(payload):
        raise ValueError("bad data")

    @app.task(name="refuse")
    def refuse(payload):
        raise zsched.Fail("payload names a deleted account")

    @app.task(name="good")
    def ok(payload):
        good.append(payload)

    app.enqueue("broken", None, run_id="b")
    app.enqueue("refuse", None, run_id="r")
    app.enqueue("missing", None, run_id="m")
    app.enqueue("good", 1, run_id="g")
    w = app.worker(redis=backend.async_client())
    await w.setup()
    backend.sync.xadd(app.keys.ready, {"run_id": "junk", "envelope": b"\xc1garbage"})
    backend.sync.xadd(app.keys.ready, {"nothing": "here"})
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    await w.tick()
    assert good == [1]
    reasons = {x.run_id: x.reason for x in app.dead_letters()}
    assert reasons["b"].startswith("failed after 1 attempt(s): ValueError: bad data (at ")
    assert reasons["r"] == "failed: payload names a deleted account"
    assert reasons["m"] == "unknown task 'missing': not registered with this worker"
    assert reasons["junk"].startswith("undecodable envelope")
    assert reasons[""].startswith("undecodable envelope: envelope is empty")
    assert app.get_run("b").state == "dead" and app.get_run("b").dead_reason == reasons["b"]
    st = snapshot(backend.sync, app.keys)
    assert st["ready"] == [] and st["pending"] == [] and st["runs"] == {}
    await d.close()
    await w.close()


async def test_dead_letters_replay_as_fresh_runs(backend, queue) -> None:
    app = make(backend, queue)
    calls = []

    @app.task(name="once", max_attempts=1)
    def once(payload):
        calls.append(zsched.current_run().attempt)
        if len(calls) == 1:
            raise RuntimeError("first time fails")

    app.enqueue("once", None, run_id="x")
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    assert app.get_run("x").state == "dead"
    assert app.replay_dead() == {"replayed": 1, "missing": 0, "live": 0, "undecodable": 0}
    await d.tick()
    await w.tick()
    assert calls == [1, 1] and app.get_run("x").state == "done"
    assert app.dead_letters() == []
    await d.close()
    await w.close()


@pytest.mark.parametrize("step", ["after_read", "after_handler", "during_ack"])
async def test_one_place_at_a_time_when_a_worker_dies_at_each_step(backend, queue, step) -> None:
    """Invariant 1: a crash at any step leaves every run in exactly one place."""
    app = make(backend, queue)
    executed = []

    @app.task(name="t")
    def t(payload):
        executed.append(zsched.current_run().run_id)

    ids = [f"r{i}" for i in range(20)]
    app.enqueue_many([{"task": "t", "run_id": i} for i in ids])
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    victim = app.worker(redis=backend.async_client(), consumer="victim")
    await victim.setup()
    batch = await victim.reader.read(100, None)
    if step != "after_read":
        for dl in batch:
            victim.runner.start(dl)
        while victim.runner.tasks:
            await asyncio.gather(*victim.runner.tasks)
    if step == "during_ack":
        # Half of the acks reach Redis before the crash.
        victim.writer.acks = victim.writer.acks[:10]
        await victim.flush()
    # The victim is gone: nothing more from it. Every run is in exactly one place.
    for rid in ids:
        assert len(places(backend.sync, app.keys, rid)) == 1, rid
    rescuer = app.worker(redis=backend.async_client(), consumer="rescuer",
                         visibility_timeout_ms=0)  # fmt: skip
    for dl in await rescuer.holds.reclaim(100):
        rescuer.runner.start(dl)
    await rescuer.drain()
    for rid in ids:
        assert places(backend.sync, app.keys, rid) == ["done"], rid
    assert set(executed) == set(ids)
    extra = len(executed) - len(ids)
    assert extra == {"after_read": 0, "after_handler": 20, "during_ack": 10}[step]
    assert app.status().stats.get("reclaimed", 0) == 20 - (10 if step == "during_ack" else 0)
    await d.close()
    await victim.close()
    await rescuer.close()


async def test_a_zombie_worker_cannot_ack_a_run_reclaimed_by_another(backend, queue) -> None:
    app = make(backend, queue)

    @app.task(name="t")
    def t(payload):
        pass

    app.enqueue("t", None, run_id="z")
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    zombie = app.worker(redis=backend.async_client(), consumer="zombie")
    await zombie.setup()
    (dl,) = await zombie.reader.read(10, None)
    rescuer = app.worker(redis=backend.async_client(), consumer="rescuer", visibility_timeout_ms=0)
    (claimed,) = await rescuer.holds.reclaim(10)
    # The zombie wakes up: its hold renewal and ack are refused and counted.
    assert await zombie.holds.renew() == 0  # holds nothing running now
    zombie.writer.acks.append((dl.entry_id, dl.run_id))
    await zombie.flush()
    assert app.metrics.fenced.labels(queue, "ack")._value.get() == 1
    assert app.get_run("z").state == "running" and app.get_run("z").consumer == "rescuer"
    rescuer.runner.start(claimed)
    await rescuer.drain()
    assert app.get_run("z").state == "done"
    for x in (d, zombie, rescuer):
        await x.close()


async def test_a_paused_worker_does_not_reclaim_the_runs_it_still_holds(backend, queue) -> None:
    # After a pause (SIGSTOP, Redis restart) the entries a worker holds look idle; its own
    # reclaim must renew them, not take them over again (one reclaim counted, two executions).
    app = make(backend, queue)
    app.enqueue_many([("t", i) for i in range(3)])
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    w = app.worker(redis=backend.async_client(), consumer="w", visibility_timeout_ms=60_000)
    await w.setup()
    held = await w.reader.read(2, None)
    for dl in held:
        w.running[dl.entry_id] = dl
    for dl in held:  # idle far past the visibility timeout, still owned by w
        backend.sync.xclaim(app.keys.ready, GROUP, "w", 0, [dl.entry_id], idle=600_000, justid=True)
    assert await w.holds.reclaim(10) == []
    assert app.status().stats.get("reclaimed", 0) == 0
    rows = backend.sync.xpending_range(app.keys.ready, GROUP, "-", "+", 10)
    assert sorted((r["consumer"], r["times_delivered"]) for r in rows) == [(b"w", 1), (b"w", 1)]
    assert all(r["time_since_delivered"] < 60_000 for r in rows)
    for x in (d, w):
        await x.close()


async def test_hold_renewal_tells_a_worker_it_lost_the_run(backend, queue) -> None:
    app = make(backend, queue)
    app.enqueue("t", None, run_id="l")
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    w1 = app.worker(redis=backend.async_client(), consumer="w1")
    await w1.setup()
    (dl,) = await w1.reader.read(10, None)
    w1.running[dl.entry_id] = dl
    assert await w1.holds.renew() == 0
    w2 = app.worker(redis=backend.async_client(), consumer="w2", visibility_timeout_ms=0)
    assert len(await w2.holds.reclaim(10)) == 1
    assert await w1.holds.renew() == 1
    assert app.metrics.fenced.labels(queue, "renew")._value.get() == 1
    for x in (d, w1, w2):
        await x.close()


async def test_graceful_shutdown_hands_back_what_it_did_not_finish(backend, queue) -> None:
    app = make(backend, queue)
    gate = asyncio.Event()
    done = []

    @app.task(name="wait")
    async def wait(payload):
        await gate.wait()
        done.append(payload)

    app.enqueue_many([("wait", i) for i in range(30)])
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    w = app.worker(redis=backend.async_client(), concurrency=5, shutdown_grace_ms=50,
                   block_ms=50, read_ahead=10)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    while len(w.running) < 5:
        await asyncio.sleep(0.01)
    stop.set()
    await task
    st = app.status()
    # The five it ran and the ten it read ahead went back to the delayed set; the unread
    # ones never left the stream.
    assert st.pending == 0 and done == []
    assert (st.delayed, st.stream_length) == (15, 15)
    # Nothing lost: a fresh worker finishes every run.
    gate.set()
    await d.tick()
    w2 = app.worker(redis=backend.async_client(), concurrency=50)
    await w2.tick()
    assert sorted(done) == list(range(30))
    for x in (d, w, w2):
        await x.close()


async def test_noscript_recovery_after_script_flush(real, queue) -> None:
    app = real.app(queue)
    ran = []

    @app.task(name="t")
    def t(payload):
        ran.append(payload)

    app.enqueue("t", 1)
    d, w = app.dispatcher(redis=real.async_client()), app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    real.sync.script_flush()
    app.enqueue("t", 2)
    app.enqueue_many([("t", 3)])
    await d.tick()
    await w.tick()
    assert sorted(ran) == [1, 2, 3]
    await d.close()
    await w.close()


async def test_enqueue_many_splits_big_batches_in_one_round_trip(backend, queue) -> None:
    app = make(backend, queue)
    ids = app.enqueue_many([{"task": "t", "payload": i, "delay": 30} for i in range(2500)])
    assert len(set(ids)) == 2500 and not any(i.duplicate for i in ids)
    assert app.status().delayed == 2500
    raw = envelope_of(backend.sync, app.keys, ids[1234])
    assert msgpack.unpackb(raw)[2] == 1234  # [v, task, payload, ...]


def test_naive_datetime_and_bad_delays_are_refused(backend, queue) -> None:
    from datetime import datetime, timedelta

    app = make(backend, queue)
    with pytest.raises(ValueError, match="naive datetime"):
        app.enqueue("t", run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="delay must be finite"):
        app.enqueue("t", delay=float("nan"))
    with pytest.raises(ValueError, match="delay must be finite"):
        app.enqueue("t", delay=timedelta(seconds=-1))
    with pytest.raises(zsched.PayloadError, match="cannot be serialised"):
        app.enqueue("t", {"x": {1, 2}})
    with pytest.raises(zsched.PayloadError, match="over the limit"):
        app.enqueue("t", "x" * (600 * 1024))
    assert app.status().delayed == 0


def test_group_is_created_from_the_start_of_the_stream(real, queue) -> None:
    app = real.app(queue)
    app.enqueue("t", None)
    asyncio.run(_dispatch_then_group(app, real))
    assert real.sync.xinfo_groups(app.keys.ready)[0]["name"] == GROUP.encode()


async def _dispatch_then_group(app, real) -> None:
    d = app.dispatcher(redis=real.async_client())
    await d.tick()
    w = app.worker(redis=real.async_client())
    assert await w.tick() == 1
    await d.close()
    await w.close()
