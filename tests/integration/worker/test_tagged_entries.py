"""Every reader of the ready stream reads an entry in both its shapes (docs/protocol.md,
"Keys"): plain (`run_id`, `envelope`, `due_ms`) and tagged (`run_id`, `envelope` holding the
run's value of `runs` as it was: due tag, then envelope). dispatch.lua writes tagged entries
on a new queue, plain ones on a queue of zsched 0.3 until it is switched
(tests/integration/worker/test_entry_shape.py); each test here runs on both."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from worker_ticks import tick_until_finished

from zsched.protocol.envelope import decode
from zsched.protocol.keys import GROUP
from zsched.runs import controls as C
from zsched.runs import entry_shape
from zsched.runs.controls import CancelOutcome
from zsched.store import scripts as S
from zsched.store.delayed import tag, untag
from zsched.store.replies import entry_payload
from zsched.worker.delivery import from_entry, from_reply

NOW = 1_800_000_000_000


@pytest.fixture(params=entry_shape.SHAPES)
def shape(request: pytest.FixtureRequest) -> str:
    return request.param


def dispatch_in(shape: str, r, app, n: int) -> dict[str, int]:
    """Enqueue runs r0..r{n-1} due in the past and dispatch them as entries of `shape`.
    Returns each run's due."""
    k = app.keys
    entry_shape.write(r, k, shape)
    for i in range(n):
        app.enqueue("t", {"i": i}, run_id=f"r{i}", run_at=(NOW + i) / 1000)
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(k, now_ms=NOW + 10_000, limit=100, max_backlog=0))
    return dues_of(r, k, shape)


def dues_of(r, k, shape: str) -> dict[str, int]:
    """Each ready entry's run id and due, checking that every entry is of `shape`."""
    dues = {}
    for _, f in r.xrange(k.ready):
        tagged = b"due_ms" not in f and f[b"envelope"][:1] == b"\0"
        assert tagged == (shape == "tagged"), f
        dues[f[b"run_id"].decode()] = entry_payload(f)[1]
    return dues


def test_both_shapes_give_the_same_envelope_and_due() -> None:
    env = b"\x93\xa1t\x80\x01"
    old = {b"run_id": b"a", b"envelope": env, b"due_ms": b"1234"}
    new = {b"run_id": b"a", b"envelope": tag(1234, env)}
    assert entry_payload(old) == entry_payload(new) == (env, 1234)
    assert entry_payload({b"run_id": b"a", b"envelope": env}) == (env, None)  # untagged, no due
    short = b"\0\0\1"  # starts like a tag but is shorter than one: taken as it is
    assert entry_payload({b"run_id": b"a", b"envelope": short}) == (short, None)
    for f in (old, new):
        d = from_entry(b"1-0", f)
        assert (d.entry_id, d.run_id, d.raw, d.due_ms) == ("1-0", "a", env, 1234)
        flat = [x for kv in f.items() for x in kv]
        (r,) = from_reply([[b"s", [[b"1-0", flat]]]])
        assert (r.entry_id, r.run_id, r.raw, r.due_ms) == ("1-0", "a", env, 1234)
    # An untagged envelope without due_ms goes the long way, and reads as from_entry.
    (r,) = from_reply([[b"s", [[b"1-0", [b"run_id", b"a", b"envelope", env]]]]])
    assert (r.raw, r.due_ms) == (env, None)


async def test_a_worker_runs_and_finishes_tagged_entries(backend, queue, shape) -> None:
    app = backend.app(queue)
    done: list[Any] = []
    app.task(name="t")(lambda payload: done.append(payload["i"]))
    r, k = backend.sync, app.keys
    dispatch_in(shape, backend.sync, app, 3)
    got = app.get_run("r1")
    assert (got.state, got.task, got.attempt) == ("ready", "t", 1)
    assert got.run_at is not None and round(got.run_at.timestamp() * 1000) == NOW + 1
    w = app.worker(redis=backend.async_client())
    await tick_until_finished(w, r, k.runs)
    assert sorted(done) == [0, 1, 2]
    assert {app.get_run(f"r{i}").state for i in range(3)} == {"done"}
    assert r.xlen(k.ready) == 0


def test_release_puts_a_tagged_entry_back_in_the_tree_tagged_once(backend, queue, shape) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    dues = dispatch_in(shape, backend.sync, app, 2)
    ((_, entries),) = r.xreadgroup(GROUP, "c", {k.ready: ">"}, count=10)
    pairs = [(e.decode(), f[b"run_id"].decode()) for e, f in entries]
    assert app.scripts.run(S.release(k, "c", pairs, now_ms=NOW + 20_000)) == [1, 1]
    for run_id in dues:
        at, env = untag(r.hget(k.runs, run_id))
        assert at == NOW + 20_000  # released: due now
        assert decode(env, run_id).payload == {"i": int(run_id[1:])}
    assert r.xlen(k.ready) == 0


def test_revoke_of_a_ready_tagged_entry_returns_its_envelope(backend, queue, shape) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    dispatch_in(shape, backend.sync, app, 1)
    got = app.scripts.run(C.revoke(k, "r0", now_ms=NOW + 20_000, dedupe_window_ms=60_000))
    assert got.outcome == CancelOutcome.CANCELLED_READY
    assert got.envelope is not None and decode(got.envelope, "r0").payload == {"i": 0}
    assert r.xlen(k.ready) == 0 and not r.hexists(k.runs, "r0")


@pytest.mark.parametrize("hand_over", [False, True])
def test_reclaim_hands_over_or_dead_letters_tagged_entries_with_their_envelope(
    backend, queue, hand_over, shape
) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    dispatch_in(shape, backend.sync, app, 2)
    r.xreadgroup(GROUP, "gone", {k.ready: ">"}, count=10)

    def reclaim(max_deliveries: int) -> Any:
        return app.scripts.run(S.reclaim(k, "c", now_ms=None, min_idle_ms=0, count=10,
                                         max_deliveries=max_deliveries, hand_over=hand_over))  # fmt: skip

    claimed = reclaim(10).claimed
    assert sorted(decode(c.envelope, c.run_id).payload["i"] for c in claimed) == [0, 1]
    res = reclaim(1)  # delivered twice now: past max_deliveries
    if hand_over:
        assert [decode(c.envelope, c.run_id).payload for c in res.over] == []  # not rule runs
    letters = r.xrange(k.dead)
    assert len(letters) == 2
    for _, f in letters:
        assert decode(f[b"envelope"], f[b"run_id"].decode()).payload["i"] in (0, 1)


def test_the_testing_kit_lists_a_tagged_entry_as_ready(shape) -> None:
    from zsched.testing import Kit

    kit = Kit()
    try:
        app, r = kit.app, kit.app.redis
        app.task(name="t")(lambda payload: None)

        dispatch_in(shape, r, app, 2)
        got = kit.enqueued()
        assert [(q.run_id, q.state, q.payload) for q in got] == [
            ("r0", "ready", {"i": 0}), ("r1", "ready", {"i": 1})]  # fmt: skip
    finally:
        kit.close()


async def test_a_spilled_tagged_entry_is_refilled_with_its_envelope(real, queue, shape) -> None:
    ran: list = []
    release = asyncio.Event()
    app = real.app(queue)
    entry_shape.write(real.sync, app.keys, shape)

    @app.task(name="t")
    async def t(payload):
        ran.append(payload)
        await release.wait()

    big = ["x" * 1000 + str(i) for i in range(3)]
    for p in big:
        app.enqueue("t", p)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(
        redis=real.async_client(), concurrency=1, read_ahead=2, max_read_ahead_bytes=1500
    )
    await w.setup()
    await d.tick()
    assert len(dues_of(real.sync, app.keys, shape)) == 3
    assert await w.reader.tick() == 1
    assert any(x.spilled for x in w.runner.waiting)
    release.set()
    for _ in range(20):
        if len(ran) == len(big):
            break
        await w.runner.drain()
        await w.reader.tick()
    await w.runner.drain()
    await w.flush()
    assert ran == big  # reverted refill: the spilled run gets b"" and is dead-lettered
    assert int(app.redis.xpending(app.keys.ready, GROUP)["pending"]) == 0
    await d.close()
    await w.close()


def test_the_testing_kit_drains_tagged_entries(shape) -> None:
    from zsched.testing import Kit

    kit = Kit()
    try:
        app = kit.app
        seen: list = []
        app.task(name="t")(lambda payload: seen.append(payload["i"]))
        entry_shape.write(app.redis, app.keys, shape)
        for i in range(2):
            app.enqueue("t", {"i": i}, run_id=f"r{i}")
        kit.advance(timedelta(seconds=0))  # dispatch
        assert len(dues_of(app.redis, app.keys, shape)) == 2
        out = kit.drain()
        assert sorted((o.run_id, o.task, o.outcome) for o in out) == [
            ("r0", "t", "done"),
            ("r1", "t", "done"),
        ]
        assert sorted(seen) == [0, 1]
    finally:
        kit.close()
