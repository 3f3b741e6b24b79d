"""Pausing a queue: dispatchers move nothing to the stream while it is paused (delayed runs
wait, rule slots are still fired into the delayed set and recorded), workers finish what is
on the stream, resume wakes the dispatchers; status shows the pause; drain pauses and waits
until the stream is empty."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import zsched
from zsched import FakeClock
from zsched.cli.main import main
from zsched.observability.metrics import Metrics
from zsched.store import scripts as S

NOW = 1_800_000_000_000


def dispatch(app: zsched.App, now: int = NOW) -> S.DispatchResult:
    return app.scripts.run(S.dispatch(app.keys, now_ms=now, limit=100, max_backlog=0))


def test_a_paused_queue_dispatches_nothing_until_resumed(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    app.enqueue("t", None, run_id="a", run_at=(NOW - 5) / 1000)
    assert app.pause_queue(note="deploy") is True
    assert app.pause_queue() is False  # already paused: time and note kept
    r = dispatch(app)
    assert (r.moved, r.backlogged, r.paused) == (0, True, True)
    assert backend.sync.xlen(app.keys.ready) == 0 and app.get_run("a").state == "scheduled"
    st = app.status()
    assert (st.paused, st.paused_ms, st.pause_note) == (True, NOW, "deploy")
    assert app.resume_queue() is True
    assert app.resume_queue() is False
    r = dispatch(app)
    assert (r.moved, r.backlogged, r.paused) == (1, False, False)
    assert app.status().paused is False


def test_the_idle_pass_of_a_paused_queue_costs_no_extra_command(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    app.pause_queue()
    app.enqueue("t", None, run_id="later", run_at=(NOW + 60_000) / 1000)
    r = dispatch(app)  # nothing due: answered from the head, paused or not
    assert (r.moved, r.backlogged, r.paused, r.next_due_ms) == (0, False, False, NOW + 60_000)


def test_resume_publishes_a_wake(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    app.pause_queue()
    ps = backend.sync.pubsub()
    ps.subscribe(app.keys.wake)
    assert ps.get_message(timeout=5)["type"] == "subscribe"
    app.resume_queue()
    assert ps.get_message(timeout=5)["data"] == str(NOW).encode()
    ps.close()


async def test_rule_slots_are_fired_and_recorded_while_paused_and_run_after(backend, queue):
    clock = FakeClock(NOW)
    app = backend.app(queue, clock=clock, metrics=Metrics())
    ran = []

    @app.task(name="tick")
    def tick(payload: Any) -> None:
        ran.append(zsched.current_run().run_id)

    app.schedule("every-minute", "tick", every=60)
    app.pause_queue()
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    for i in range(3):
        clock.set(NOW + i * 60_000)
        t = await d.tick()
        assert t.moved == 0 and not t.backlogged
        await w.tick()
    history = app.schedule_history("every-minute")
    assert [h["outcome"] for h in history] == ["ran", "ran", "ran"]  # on time, into delayed
    assert ran == [] and app.status().delayed == 3 and backend.sync.xlen(app.keys.ready) == 0
    app.resume_queue()
    assert (await d.tick()).moved == 3
    await w.tick()
    assert len(ran) == 3
    await d.close()
    await w.close()


async def test_workers_finish_what_is_on_the_stream_while_paused(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW), metrics=Metrics())
    done = []

    @app.task(name="t")
    def t(payload: Any) -> None:
        done.append(payload)

    app.enqueue("t", 1, run_id="on-stream", run_at=(NOW - 1) / 1000)
    dispatch(app)
    app.pause_queue()
    app.enqueue("t", 2, run_id="held", run_at=(NOW - 1) / 1000)
    w = app.worker(redis=backend.async_client())
    await w.tick()
    await w.close()
    assert done == [1] and app.get_run("held").state == "scheduled"


async def test_a_sleeping_dispatcher_moves_due_runs_when_resumed(real, queue) -> None:
    app = real.app(queue)
    app.pause_queue()
    app.enqueue("t", None, run_id="a")
    d = app.dispatcher(redis=real.async_client())  # max_idle 30 s: only a wake gets it going
    stop = asyncio.Event()
    loop = asyncio.create_task(d.run(stop))
    await asyncio.sleep(0.3)  # its first pass found the queue paused; it sleeps for 30 s
    assert app.get_run("a").state == "scheduled"
    app.resume_queue()
    deadline = time.monotonic() + 20
    while app.get_run("a").state == "scheduled":
        assert time.monotonic() < deadline, "the dispatcher did not wake on resume"
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(loop, 10)
    await d.close()


def test_every_partition_is_paused_and_status_totals_show_it(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW), partitions=3)
    assert app.pause_queue(note="all of it")
    parts = app.partition_statuses()
    assert [p.paused for p in parts] == [True, True, True]
    st = app.status()
    assert (st.paused, st.pause_note, st.paused_ms) == (True, "all of it", NOW)
    assert app.resume_queue()
    assert not any(p.paused for p in app.partition_statuses())


async def test_drain_pauses_and_waits_until_the_stream_is_empty(real, queue) -> None:
    app = real.app(queue, metrics=Metrics())
    gate = asyncio.Event()

    @app.task(name="t")
    async def t(payload: Any) -> None:
        await gate.wait()

    app.enqueue_many([("t", i) for i in range(5)])
    d = app.dispatcher(redis=real.async_client())
    await d.tick()
    await d.close()
    app.enqueue("t", 99, run_id="after-pause")  # due now, still delayed: drain keeps it there
    seen: list[int] = []
    w = app.worker(redis=real.async_client(), block_ms=100)
    stop = asyncio.Event()
    loop = asyncio.create_task(w.run(stop))
    drained = asyncio.create_task(asyncio.to_thread(
        app.drain, 30, lambda st: seen.append(st.stream_length), 0.05))  # fmt: skip
    while not seen:
        await asyncio.sleep(0.02)
    assert seen[0] == 5 and not drained.done()
    gate.set()
    assert await asyncio.wait_for(drained, 30) is True
    assert seen[-1] == 0 and app.status().paused
    assert app.get_run("after-pause").state == "scheduled"
    stop.set()
    await asyncio.wait_for(loop, 10)
    await w.close()


def test_drain_times_out_when_nothing_consumes(real, queue) -> None:
    app = real.app(queue)
    app.enqueue("t", None)
    dispatch(app, now=int(time.time() * 1000) + 10_000)
    assert app.drain(timeout=0.1, poll=0.02) is False


def test_the_cli_pauses_resumes_shows_and_drains(redis_url, queue, capsys) -> None:
    base = ["--redis", redis_url, "--queue", queue]
    assert main(["pause", "--note", "deploy 7", *base]) == 0
    assert capsys.readouterr().out.strip() == "paused"
    assert main(["status", *base]) == 0
    out = capsys.readouterr().out
    assert "PAUSED" in out and "deploy 7" in out
    assert main(["status", *base, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["paused"], st["pause_note"]) == (True, "deploy 7")
    assert main(["drain", "--timeout", "5", *base]) == 0  # nothing on the stream
    out = capsys.readouterr().out
    assert "stream 0" in out and out.strip().endswith("the queue stays paused (zsched resume)")
    assert main(["resume", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"resumed": True}
    zsched.App(redis_url, queue=queue).enqueue("t", None, run_id="x")
    app = zsched.App(redis_url, queue=queue)
    app.scripts.run(S.dispatch(app.keys, now_ms=None, limit=10, max_backlog=0))
    assert main(["drain", "--timeout", "0.2", "--every", "0.05", *base]) == 1
    assert "timed out: 1 runs still on the stream" in capsys.readouterr().out
    app.close()


def test_the_collector_shows_the_pause(backend, queue) -> None:
    from prometheus_client import CollectorRegistry

    from zsched.observability.collector import QueueCollector

    app = backend.app(queue, clock=FakeClock(NOW))
    reg = CollectorRegistry()
    QueueCollector(backend.sync, [queue], reg, clock=FakeClock(NOW))
    assert reg.get_sample_value("zsched_queue_paused", {"queue": queue}) == 0
    app.pause_queue()
    assert reg.get_sample_value("zsched_queue_paused", {"queue": queue}) == 1
    app.resume_queue()
    assert reg.get_sample_value("zsched_queue_paused", {"queue": queue}) == 0
