"""reschedule.lua: a delayed run moves to a new due time in one call; every other place a run
can be in is told apart; moving a run earlier wakes dispatchers."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from helpers import NOW, env, seed_delayed, seed_ready
from state import delayed_count, delayed_due, delayed_ids

from zsched import FakeClock, RescheduleOutcome
from zsched.runs import controls as C
from zsched.store import scripts as S
from zsched.store.replies import entry_payload


def test_a_delayed_run_moves_to_the_new_due_and_keeps_its_envelope(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000, "b": NOW + 120_000})
    before = backend.sync.hget(app.keys.runs, "a")[7:]
    res = app.reschedule("a", run_at=(NOW + 180_000) / 1000)
    assert (res.outcome, res.moved, res.due_ms) == (RescheduleOutcome.MOVED, True, NOW + 180_000)
    assert delayed_ids(backend.sync, app.keys) == ["b", "a"]
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 180_000
    assert delayed_count(backend.sync, app.keys) == 2
    assert backend.sync.hget(app.keys.runs, "a")[7:] == before
    assert app.get_run("a").run_at == datetime.fromtimestamp((NOW + 180_000) / 1000, UTC)


def test_a_delay_is_counted_from_the_pinned_clock(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    res = app.reschedule("a", delay=5)
    assert res.due_ms == NOW + 5_000
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 5_000


def test_a_relative_delay_follows_the_redis_clock(backend, queue) -> None:
    app = backend.app(queue)
    app.enqueue("t", None, run_id="a", delay=3600)
    t = backend.sync.time()
    server_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    res = app.reschedule("a", delay=10)
    assert res.moved and server_ms + 10_000 <= res.due_ms < server_ms + 70_000


def test_a_moved_run_is_dispatched_at_its_new_due(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    app.reschedule("a", run_at=(NOW - 1) / 1000)
    r = app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=10, max_backlog=0))
    assert (r.moved, r.run_at_ms) == (1, [NOW - 1])
    fields = backend.sync.xrange(app.keys.ready)[0][1]
    assert entry_payload(fields)[1] == NOW - 1


def test_every_place_that_is_not_delayed_is_told_apart(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["running", "done", "dead"])
    seed_delayed(backend, queue, {"ready": NOW - 1})
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=10, max_backlog=0))
    app.scripts.run(S.ack(app.keys, "c1", [(entries["done"], "done")], now_ms=NOW,
                          dedupe_window_ms=60_000))  # fmt: skip
    app.scripts.run(S.dead(app.keys, "c1", [(entries["dead"], "dead", "boom", env("dead"))],
                           now_ms=NOW))  # fmt: skip
    want = {"running": RescheduleOutcome.RUNNING, "ready": RescheduleOutcome.READY,
            "done": RescheduleOutcome.DONE, "dead": RescheduleOutcome.DEAD,
            "nobody": RescheduleOutcome.NOT_FOUND}  # fmt: skip
    before = {k: backend.sync.dump(getattr(app.keys, k)) for k in ("runs", "ready", "dead")}
    for run_id, outcome in want.items():
        res = app.reschedule(run_id, run_at=(NOW + 60_000) / 1000)
        assert (res.outcome, res.moved, res.due_ms) == (outcome, False, None), run_id
    assert before == {k: backend.sync.dump(getattr(app.keys, k)) for k in before}


def test_a_dead_letter_older_than_the_scan_reads_as_not_found(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["dead"])
    app.scripts.run(S.dead(app.keys, "c1", [(entries["dead"], "dead", "x", env("dead"))],
                           now_ms=NOW))  # fmt: skip
    for i in range(3):
        backend.sync.xadd(app.keys.dead, {"run_id": f"other{i}", "reason": "x"})
    call = C.reschedule(app.keys, "dead", NOW, now_ms=NOW, dead_scan=3)
    assert app.scripts.run(call).outcome is RescheduleOutcome.NOT_FOUND
    call = C.reschedule(app.keys, "dead", NOW, now_ms=NOW, dead_scan=4)
    assert app.scripts.run(call).outcome is RescheduleOutcome.DEAD


@pytest.mark.parametrize("bad", ["soon", "-5", "1e3", "+-5", "253402300800000", ""])
def test_a_bad_due_is_refused_and_nothing_moves(backend, queue, bad) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    with pytest.raises(Exception, match="run_at_ms must be a whole number"):
        app.scripts.run(C.reschedule(app.keys, "a", bad, now_ms=NOW))
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 60_000


def test_the_api_refuses_both_or_neither_time_and_a_naive_datetime(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    with pytest.raises(ValueError, match="exactly one of run_at or delay"):
        app.reschedule("a")
    with pytest.raises(ValueError, match="exactly one of run_at or delay"):
        app.reschedule("a", run_at=1.0, delay=1)
    with pytest.raises(ValueError, match="naive"):
        app.reschedule("a", run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="delay must be finite"):
        app.reschedule("a", delay=-1)


def test_wrong_key_types_are_refused_before_any_write(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    backend.sync.set(app.keys.done, "oops")
    with pytest.raises(Exception, match="WRONGTYPE zsched reschedule"):
        app.reschedule("a", run_at=NOW / 1000)
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 60_000


def _wake_messages(backend, app, action) -> list[bytes]:
    ps = backend.sync.pubsub()
    ps.subscribe(app.keys.wake)
    assert ps.get_message(timeout=5)["type"] == "subscribe"
    action()
    backend.sync.publish(app.keys.wake, b"end")  # a marker: every message before it has come
    out = []
    while True:
        m = ps.get_message(timeout=5)
        assert m is not None, "no marker on the wake channel"
        if m["data"] == b"end":
            ps.close()
            return out
        out.append(m["data"])


def test_moving_a_run_earlier_to_the_head_publishes_a_wake(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000, "b": NOW + 120_000})
    got = _wake_messages(backend, app, lambda: app.reschedule("b", run_at=(NOW + 1000) / 1000))
    assert got == [str(NOW + 1000).encode()]


def test_moving_a_run_later_or_behind_the_head_publishes_nothing(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000, "b": NOW + 120_000, "c": NOW + 200_000})

    def moves() -> None:
        app.reschedule("a", run_at=(NOW + 300_000) / 1000)  # later
        app.reschedule("c", run_at=(NOW + 150_000) / 1000)  # earlier, not the head

    assert _wake_messages(backend, app, moves) == []


async def test_a_sleeping_dispatcher_dispatches_a_run_moved_to_now(real, queue) -> None:
    app = real.app(queue)
    app.enqueue("t", None, run_id="a", delay=3600)
    d = app.dispatcher(redis=real.async_client())  # asleep until the run is due, in an hour
    stop = asyncio.Event()
    loop = asyncio.create_task(d.run(stop))
    await asyncio.sleep(0.3)
    assert app.reschedule("a", delay=0).moved
    deadline = time.monotonic() + 20
    while app.get_run("a").state == "scheduled":
        assert time.monotonic() < deadline, "the dispatcher did not wake for the moved run"
        await asyncio.sleep(0.02)
    assert app.get_run("a").state == "ready"
    stop.set()
    await asyncio.wait_for(loop, 10)
    await d.close()


def test_fake_clock_apps_reschedule_without_touching_the_server_clock(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    app.enqueue("t", None, run_id="a", delay=60)
    assert app.reschedule("a", delay=120).due_ms == NOW + 120_000
