"""Which shape of ready entry dispatch.lua writes (docs/operations.md, "Upgrading from zsched
0.3"): tagged on a new queue (its group made by a 0.4 worker as it starts), plain on a queue
a 0.3 worker reads, a 0.3 dispatcher moved runs of, or whose group vanished (Redis lost its
data), until `zsched entries tagged`, which refuses while a consumer that may read only plain
entries is live; and what a 0.3 worker does with a tagged entry (dead-letters it whole),
which a replay recovers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis.exceptions
from worker_ticks import tick_until_finished

from zsched.cli.main import main
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.runs import entry_shape
from zsched.store import scripts as S
from zsched.store.delayed import untag
from zsched.worker.recovery import NEW_QUEUE_NOTE, READS

NOW = 1_800_000_000_000


def enqueue_and_dispatch(app, n: int = 2) -> list[dict[bytes, bytes]]:
    for i in range(n):
        app.enqueue("t", {"i": i}, run_id=f"r{i}", run_at=(NOW + i) / 1000)
    got = app.scripts.run(S.dispatch(app.keys, now_ms=NOW + 10_000, limit=100, max_backlog=0))
    assert got.moved == n and list(got.run_at_ms) == [NOW + i for i in range(n)]
    return [f for _, f in app.redis.xrange(app.keys.ready)]


def shape_of(fields: dict[bytes, bytes]) -> str:
    if b"due_ms" in fields:
        assert fields[b"envelope"][:1] != b"\0"
        return "plain"
    due, _env = untag(fields[b"envelope"])
    assert due is not None
    return "tagged"


async def test_a_new_queue_is_tagged_by_the_first_worker_and_never_by_a_dispatch(
    backend, queue
) -> None:
    """A dispatch decides nothing (missing keys cannot tell a new queue from a lost one); the
    0.4 note it leaves in `entries` lets the worker that starts next choose tagged."""
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {"plain"}
    assert r.hget(k.control, "entries") is None and r.get(k.entries).startswith(NEW_QUEUE_NOTE)
    w = app.worker(redis=backend.async_client())
    await w.setup()  # the stream exists (the dispatch made it), the group is new
    assert r.hget(k.control, "entries") == b"tagged"
    app.enqueue("t", {"i": 2}, run_id="r2", run_at=NOW / 1000)
    app.scripts.run(S.dispatch(k, now_ms=NOW + 10_000, limit=100, max_backlog=0))
    assert [shape_of(f) for _, f in r.xrange(k.ready)] == ["plain", "plain", "tagged"]
    assert untag(r.xrange(k.ready)[-1][1][b"envelope"])[0] == NOW
    await w.close()


@pytest.mark.parametrize("registered", [False, True])
def test_a_queue_whose_group_a_03_worker_made_stays_plain(backend, queue, registered) -> None:
    """A 0.3 worker makes the group as it starts, and waits: on Redis 7.0 no consumer is
    listed until an entry is delivered to it, so nothing in Redis tells it from a 0.4 worker
    that registered. The first move keeps plain either way (the safe side)."""
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    r.xreadgroup(GROUP, "old-worker", {k.ready: ">"}, count=1)  # an empty read
    if registered:
        r.hset(k.readers, "new-worker", READS)
    assert entry_shape.read(r, k).shape == "plain"
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {"plain"}
    assert r.hget(k.control, "entries") is None


@pytest.mark.parametrize("before", ["nothing", "a 0.4 dispatch", "a 0.3 dispatch", "a 0.2 dispatch",
                                    "plain chosen"])  # fmt: skip
async def test_a_04_worker_that_makes_the_group_of_a_new_queue_marks_it_tagged(
    backend, queue, before
) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    if before == "a 0.4 dispatch":
        r.set(k.entries, NEW_QUEUE_NOTE + b": ...")
    elif before == "a 0.3 dispatch":
        r.set(k.entries, "zsched 0.3+: ...")
    elif before == "a 0.2 dispatch":
        r.hset(k.entries, "r", "1-1")
    elif before == "plain chosen":
        entry_shape.write(r, k, "plain")
    w = app.worker(redis=backend.async_client())
    await w.setup()
    want = "tagged" if before in ("nothing", "a 0.4 dispatch") else "plain"
    assert entry_shape.read(r, k).shape == want
    w2 = app.worker(redis=backend.async_client())
    await w2.setup()  # finds the group (BUSYGROUP): decides nothing
    assert entry_shape.read(r, k).shape == want
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {want}
    await w.close()
    await w2.close()


async def test_a_group_that_vanished_is_made_again_without_choosing_tagged(
    backend, queue
) -> None:
    """The group gone mid-life means Redis lost its data; 0.3 workers reading the queue make it
    again too, so the worker that does it first keeps the queue plain."""
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    app.task(name="t")(lambda payload: None)
    entry_shape.write(r, k, "plain")  # chosen while 0.3 workers read it
    w = app.worker(redis=backend.async_client())
    await w.setup()
    r.flushdb()  # the data is lost: `control` too
    with pytest.raises(redis.exceptions.ResponseError, match="NOGROUP"):
        await w.reader.tick()
    w.reader.group_ready = False  # as the loop's guard does on NOGROUP (Guard.run)
    await w.reader.setup()  # the group is made again
    assert r.exists(k.ready) and r.hget(k.control, "entries") is None
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {"plain"}
    await w.close()


def test_a_queue_that_moved_runs_before_keeps_plain_until_switched(backend, queue) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    r.set(k.entries, "zsched 0.3+: ...")  # what a 0.3 dispatcher left
    assert {shape_of(f) for f in enqueue_and_dispatch(app, 1)} == {"plain"}
    assert r.hget(k.control, "entries") is None
    entry_shape.write(r, k, "tagged")
    app.enqueue("t", {"i": 9}, run_id="r9", run_at=NOW / 1000)
    app.scripts.run(S.dispatch(k, now_ms=NOW + 10_000, limit=100, max_backlog=0))
    assert [shape_of(f) for _, f in r.xrange(k.ready)] == ["plain", "tagged"]
    entry_shape.write(r, k, "plain")  # the way back, before a rollback of workers
    app.enqueue("t", {"i": 8}, run_id="r8", run_at=NOW / 1000)
    app.scripts.run(S.dispatch(k, now_ms=NOW + 10_000, limit=100, max_backlog=0))
    assert [shape_of(f) for _, f in r.xrange(k.ready)][-1] == "plain"


def test_plain_set_before_the_first_move_stays(backend, queue) -> None:
    app = backend.app(queue)
    entry_shape.write(backend.sync, app.keys, "plain")
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {"plain"}


def test_an_unknown_shape_is_refused(backend, queue) -> None:
    from zsched.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="entry shape must be one of plain, tagged"):
        entry_shape.write(backend.sync, backend.app(queue).keys, "value")


async def test_a_worker_registers_before_its_first_read_and_leaves_when_it_stops(
    backend, queue
) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    app.task(name="t")(lambda payload: None)
    w = app.worker(redis=backend.async_client())
    await w.setup()
    assert r.hgetall(k.readers) == {w.consumer.encode(): READS.encode()}
    await w.reader.tick()
    assert {shape_of(f) for f in enqueue_and_dispatch(app)} == {"tagged"}
    await tick_until_finished(w, r, k.runs)
    await w.holds.hand_back()
    assert r.hgetall(k.readers) == {}
    await w.close()


def run_cli(argv: list[str], capsys) -> tuple[int, Any]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_zsched_entries_refuses_while_a_live_consumer_did_not_register(
    real, redis_url, queue, capsys
) -> None:
    app = real.app(queue)
    r, k = real.sync, app.keys
    base = ["--redis", redis_url, "--queue", queue]
    code, out = run_cli(["entries", *base], capsys)
    assert (code, out["shape"], out["partitions"][0]["consumers"]) == (0, "plain", [])
    r.set(k.entries, "zsched 0.3+: ...")
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    r.xgroup_createconsumer(k.ready, GROUP, "new-worker")
    r.hset(k.readers, "new-worker", READS)
    r.xgroup_createconsumer(k.ready, GROUP, "old-worker")  # listed: an entry reached it

    code, out = run_cli(["entries", *base], capsys)
    assert code == 0 and out["shape"] == "plain" and not out["changed"]
    reads = {c["name"]: c["reads"] for c in out["partitions"][0]["consumers"]}
    assert reads == {"new-worker": READS, "old-worker": None}

    code, out = run_cli(["entries", "tagged", *base], capsys)
    assert (code, out["refused"], out["shape"]) == (1, True, "plain")
    assert r.hget(k.control, "entries") is None
    assert main(["entries", "tagged", *base]) == 1
    text = capsys.readouterr().out
    assert "refused: 1 consumer(s)" in text and "old-worker" in text.split("refused:")[1]

    # Idle past --idle-over: taken as stopped (XINFO's idle counts from its last read).
    code, out = run_cli(["entries", "tagged", "--idle-over", "0", *base], capsys)
    assert (code, out["refused"], out["changed"], out["shape"]) == (0, False, True, "tagged")
    assert {shape_of(f) for f in enqueue_and_dispatch(app, 1)} == {"tagged"}

    code, out = run_cli(["entries", "plain", *base], capsys)
    assert (code, out["changed"], out["shape"]) == (0, True, "plain")
    r.xreadgroup(GROUP, "old-worker", {k.ready: ">"}, count=1)  # seen again
    code, out = run_cli(["entries", "tagged", *base], capsys)
    assert (code, out["refused"]) == (1, True)
    code, out = run_cli(["entries", "tagged", "--force", *base], capsys)
    assert (code, out["refused"], out["shape"]) == (0, False, "tagged")


def test_zsched_entries_switches_every_partition(real, redis_url, queue, capsys) -> None:
    base = ["--redis", redis_url, "--queue", queue, "--partitions", "3"]
    entry_shape.write(real.sync, QueueKeys(queue, 1), "tagged")
    code, out = run_cli(["entries", *base], capsys)
    assert out["shape"] == "mixed" and [p["shape"] for p in out["partitions"]] == [
        "plain", "tagged", "plain"]  # fmt: skip
    code, out = run_cli(["entries", "tagged", *base], capsys)
    assert code == 0 and [p["shape"] for p in out["partitions"]] == ["tagged"] * 3
    assert [p["partition"] for p in out["partitions"]] == [0, 1, 2] and out["shape"] == "tagged"


async def test_a_tagged_entry_a_0_3_worker_dead_lettered_reads_and_replays(backend, queue) -> None:
    app = backend.app(queue)
    r, k = backend.sync, app.keys
    ran: list[Any] = []
    app.task(name="t")(lambda payload: ran.append(payload["i"]))
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    entry_shape.write(r, k, "tagged")  # switched (--force) with a 0.3 worker still reading
    (fields,) = enqueue_and_dispatch(app, 1)
    # A 0.3 worker reads the envelope field as it is, fails to decode it, and calls dead.lua
    # with the bytes whole (worker/delivery.py of 0.3).
    ((_, ((eid, f),)),) = r.xreadgroup(GROUP, "old-worker", {k.ready: ">"}, count=1)
    assert f[b"envelope"][:1] == b"\0"
    app.scripts.run(S.dead(k, "old-worker", [(eid.decode(), "r0", "undecodable envelope: x",
                                              f[b"envelope"])], now_ms=NOW + 20_000))  # fmt: skip
    (letter,) = app.dead_letters()
    assert (letter.run_id, letter.task) == ("r0", "t")
    got = app.get_run("r0")
    assert (got.state, got.task) == ("dead", "t")
    assert app.replay_dead() == {"replayed": 1, "missing": 0, "live": 0, "undecodable": 0}
    app.scripts.run(S.dispatch(k, now_ms=None, limit=100, max_backlog=0))
    w = app.worker(redis=backend.async_client())
    await tick_until_finished(w, r, k.runs)
    assert ran == [0]
    await w.close()
