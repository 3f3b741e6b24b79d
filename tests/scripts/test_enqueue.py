"""enqueue.lua: given state -> call -> reply and complete resulting state."""

from __future__ import annotations

import pytest
import redis
from state import snapshot

from zsched import FakeClock
from zsched.protocol.envelope import Envelope
from zsched.protocol.replies import EnqueueCode
from zsched.store import scripts as S

NOW = 1_800_000_000_000


def group(run_id: str, at: int | str = NOW + 1000, task: str = "t") -> tuple:
    env = Envelope(run_id, task, {"n": 1}, NOW, NOW, NOW).encode()
    return (run_id, at, task, env)


def run(backend, queue, groups, now=NOW, window=60_000, max_bytes=10_000):
    app = backend.app(queue, clock=FakeClock(now))
    call = S.enqueue(app.keys, groups, now_ms=now, dedupe_window_ms=window,
                     max_envelope_bytes=max_bytes)  # fmt: skip
    return app, app.scripts.run(call)


def test_enqueue_adds_to_delayed_and_runs_together(backend, queue) -> None:
    app, codes = run(backend, queue, [group("a"), group("b", NOW + 5)])
    assert codes == [EnqueueCode.ENQUEUED, EnqueueCode.ENQUEUED]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"a": NOW + 1000, "b": NOW + 5}
    assert set(st["runs"]) == {"a", "b"}
    assert st["runs"]["a"]["task"] == "t"
    assert st["stats"] == {"enqueued": 2}
    assert st["ready"] == [] and st["done"] == {}


def test_enqueue_of_a_live_run_id_is_a_duplicate_and_changes_nothing(backend, queue) -> None:
    app, _ = run(backend, queue, [group("a", NOW + 1000)])
    before = snapshot(backend.sync, app.keys)
    _, codes = run(backend, queue, [group("a", NOW + 9999)])
    after = snapshot(backend.sync, app.keys)
    assert codes == [EnqueueCode.DUPLICATE_LIVE]
    assert after["delayed"] == before["delayed"]
    assert after["stats"]["duplicate"] == 1


def test_a_batch_with_the_same_id_twice_enqueues_it_once(backend, queue) -> None:
    _, codes = run(backend, queue, [group("a"), group("a")])
    assert codes == [EnqueueCode.ENQUEUED, EnqueueCode.DUPLICATE_LIVE]


def test_enqueue_of_a_recently_done_id_is_a_duplicate_until_the_window_passes(backend, queue):
    app = backend.app(queue)
    backend.sync.zadd(app.keys.done, {"a": NOW - 10_000})
    _, codes = run(backend, queue, [group("a")], window=60_000)
    assert codes == [EnqueueCode.DUPLICATE_DONE]
    _, codes = run(backend, queue, [group("a")], now=NOW + 60_000)
    assert codes == [EnqueueCode.ENQUEUED]


def test_relative_run_at_is_counted_from_now(backend, queue) -> None:
    app, _ = run(backend, queue, [group("a", "+2500")])
    assert snapshot(backend.sync, app.keys)["delayed"] == {"a": NOW + 2500}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (("", NOW, "t", b"x"), "run_id is empty"),
        (("a" * 513, NOW, "t", b"x"), "longer than 512"),
        (("r", "soon", "t", b"x"), "run_at_ms must be a whole number"),
        (("r", -5, "t", b"x"), "run_at_ms must be a whole number"),
        (("r", "1.5", "t", b"x"), "run_at_ms must be a whole number"),
        (("r", NOW, "", b"x"), "task is empty"),
        (("r", NOW, "t", b""), "envelope is empty"),
        (("r", NOW, "t", b"x" * 20_000), "over the limit"),
    ],
)
def test_bad_input_is_refused_and_nothing_of_the_batch_is_written(backend, queue, bad, message):
    app = backend.app(queue)
    with pytest.raises(redis.ResponseError, match=message):
        run(backend, queue, [group("good"), bad])
    assert snapshot(backend.sync, app.keys)["runs"] == {}


def test_enqueue_wakes_dispatchers_only_when_the_run_is_the_new_head(real, queue) -> None:
    app = real.app(queue)
    ps = real.sync.pubsub(ignore_subscribe_messages=True)
    ps.subscribe(app.keys.wake)
    ps.get_message(timeout=1)
    run(real, queue, [group("late", NOW + 10_000)])
    assert ps.get_message(timeout=1)["data"] == str(NOW + 10_000).encode()
    run(real, queue, [group("later", NOW + 20_000)])
    assert ps.get_message(timeout=0.2) is None
    run(real, queue, [group("sooner", NOW + 1)])
    assert ps.get_message(timeout=1)["data"] == str(NOW + 1).encode()
    ps.close()


def test_wrong_type_key_is_refused_before_any_write(backend, queue) -> None:
    app = backend.app(queue)
    backend.sync.set(app.keys.done, "oops")
    with pytest.raises(
        redis.ResponseError, match="WRONGTYPE zsched enqueue: key .*done is a string"
    ):
        run(backend, queue, [group("a")])
    assert backend.sync.exists(app.keys.runs, app.keys.delayed) == 0


def _wakes(real, app, groups_list) -> list[bytes]:
    """What the wake channel carries while each batch of groups is enqueued in turn."""
    ps = real.sync.pubsub(ignore_subscribe_messages=True)
    ps.subscribe(app.keys.wake)
    ps.get_message(timeout=1)
    for groups in groups_list:
        run(real, app.keys.queue, groups)
    real.sync.publish(app.keys.wake, b"end")  # a marker: every message before it has come
    got = []
    while (m := ps.get_message(timeout=1)) is not None and m["data"] != b"end":
        got.append(m["data"])
    ps.close()
    return got


@pytest.mark.parametrize("runs_before", [3, 300])  # one leaf; many leaves (64 runs a leaf)
def test_only_a_run_that_sorts_before_every_waiting_run_wakes_dispatchers(real, queue, runs_before):
    app = real.app(queue)
    before = [group(f"m{i:04d}", NOW + 1000 + i) for i in range(runs_before)]
    assert _wakes(real, app, [before]) == [str(NOW + 1000).encode()]
    # Due with the head but after it in (due, run id) order: the head stays, no wake. Later
    # runs neither; one before the head does, and so does a tie that sorts first.
    assert _wakes(real, app, [[group("m9", NOW + 1000)], [group("z", NOW + 5000)]]) == []
    assert _wakes(real, app, [[group("early", NOW + 999)], [group("a", NOW + 999)]]) == [
        str(NOW + 999).encode(),
        str(NOW + 999).encode(),
    ]


def test_a_wrong_type_index_of_the_delayed_set_is_refused_before_any_write(backend, queue):
    app = backend.app(queue)
    backend.sync.set(app.keys.delayed_index, "oops")
    with pytest.raises(
        redis.ResponseError, match="WRONGTYPE zsched enqueue: key .*:index is a string"
    ):
        run(backend, queue, [group("a"), group("b", NOW + 1)])
    assert backend.sync.exists(app.keys.runs, app.keys.delayed, app.keys.stats) == 0


def test_a_delayed_set_of_key_layout_2_is_refused_before_any_write(backend, queue) -> None:
    app = backend.app(queue)
    backend.sync.zadd(app.keys.delayed, {"old": NOW})
    with pytest.raises(redis.ResponseError, match="key layout 2; run `zsched migrate`"):
        run(backend, queue, [group("a")])
    assert backend.sync.exists(app.keys.runs, app.keys.delayed_index, app.keys.stats) == 0
    assert backend.sync.zrange(app.keys.delayed, 0, -1) == [b"old"]


def test_a_wrong_type_stats_key_is_refused_before_any_write(backend, queue) -> None:
    """stats is checked by enqueue.lua's first write (its count), new runs or duplicates."""
    app = backend.app(queue)
    run(backend, queue, [group("a")])
    backend.sync.delete(app.keys.stats)
    backend.sync.set(app.keys.stats, "oops")
    before = {k: backend.sync.dump(k) for k in (app.keys.runs, app.keys.delayed, app.keys.done)}
    for groups in ([group("b")], [group("a")]):  # a new run; a duplicate only
        with pytest.raises(redis.ResponseError, match="WRONGTYPE zsched enqueue: key .*stats"):
            run(backend, queue, groups)
        assert {k: backend.sync.dump(k) for k in before} == before


def test_a_refused_delayed_set_leaves_the_counters_as_they_were(backend, queue) -> None:
    """The count of new runs goes first and is taken back when the tree refuses them."""
    app = backend.app(queue)
    run(backend, queue, [group("a"), group("b")])
    run(backend, queue, [group("a")])
    stats = backend.sync.hgetall(app.keys.stats)
    assert stats[b"enqueued"] == b"2"
    backend.sync.set(app.keys.delayed_index, "oops")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE zsched enqueue: key .*:index"):
        run(backend, queue, [group("c")])
    assert backend.sync.hgetall(app.keys.stats) == stats


@pytest.mark.parametrize("bad_key", ["runs", "done", "stats", "delayed_index"])
def test_a_one_run_enqueue_refused_by_any_key_leaves_every_key_as_it_was(backend, queue, bad_key):
    """One run is written to `runs` by HSETNX before `stats` and the tree are checked: a refusal
    takes it back."""
    app = backend.app(queue)
    run(backend, queue, [group("a"), group("b", NOW + 5)])
    keys = [app.keys.runs, app.keys.delayed, app.keys.delayed_index, app.keys.done, app.keys.stats]
    backend.sync.delete(getattr(app.keys, bad_key))
    backend.sync.set(getattr(app.keys, bad_key), "oops")
    before = {k: backend.sync.dump(k) for k in keys}
    with pytest.raises(redis.ResponseError, match="WRONGTYPE zsched enqueue"):
        run(backend, queue, [group("c", NOW + 3)])
    assert {k: backend.sync.dump(k) for k in keys} == before


@pytest.mark.parametrize("size", [2, 100], ids=["small batch", "fast pass"])
@pytest.mark.parametrize("bad_key", ["runs", "done", "stats", "delayed_index"])
def test_a_batch_refused_by_any_key_leaves_every_key_as_it_was(backend, queue, bad_key, size):
    """A batch's values are written to `runs` before `stats` and the tree are checked (HSET's
    count tells a run id given twice): a refusal takes them back."""
    app = backend.app(queue)
    run(backend, queue, [group("a"), group("b", NOW + 5)])
    keys = [app.keys.runs, app.keys.delayed, app.keys.delayed_index, app.keys.done, app.keys.stats]
    backend.sync.delete(getattr(app.keys, bad_key))
    backend.sync.set(getattr(app.keys, bad_key), "oops")

    def state():  # `runs` by content: HSET then HDEL may leave it in another encoding
        got = {k: backend.sync.dump(k) for k in keys if k != app.keys.runs}
        return got, backend.sync.type(app.keys.runs), _hash_or_none(backend, app.keys.runs)

    before = state()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE zsched enqueue"):
        run(backend, queue, [group(f"c{i}", NOW + 3 + i) for i in range(size)])
    assert state() == before


def _hash_or_none(backend, key):
    return backend.sync.hgetall(key) if backend.sync.type(key) == b"hash" else None


@pytest.mark.parametrize("size", [3, 300], ids=["small batch", "fast pass"])
def test_a_run_id_given_twice_in_a_batch_keeps_the_first_value_and_due(backend, queue, size):
    """The first of a repeated run id is the run, whatever HSET kept of the later ones; a
    repeated id after it, or three times, is a duplicate each time."""
    app = backend.app(queue)
    batch = [(f"n{i:03d}", NOW + 100 + i, "t", _env(f"n{i:03d}", i)) for i in range(size)]
    batch[1] = ("n000", NOW + 7, "t", _env("n000", 10_000))
    batch[-1] = ("n000", NOW + 9, "t", _env("n000", 20_000))
    _, codes = run(backend, queue, batch)
    assert codes == [EnqueueCode.ENQUEUED] + [EnqueueCode.DUPLICATE_LIVE] + [
        EnqueueCode.ENQUEUED
    ] * (size - 3) + [EnqueueCode.DUPLICATE_LIVE]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"]["n000"] == NOW + 100
    assert st["runs"]["n000"]["payload"] == {"n": 0}
    assert len(st["runs"]) == len(st["delayed"]) == size - 2
    assert st["stats"] == {"enqueued": size - 2, "duplicate": 2, "duplicate:live": 2}


def _env(run_id: str, n: int) -> bytes:
    return Envelope(run_id, "t", {"n": n}, NOW, NOW, NOW).encode()


@pytest.mark.parametrize("size", [1, 2, 100], ids=["one run", "small batch", "fast pass"])
def test_a_batch_refused_by_maxmemory_gets_the_clean_oom_reply_and_writes_nothing(
    real, queue, size
) -> None:
    """The first write of a call (one run's HSETNX, a batch's HSET of `runs`) runs under pcall:
    Redis's refusal comes back as it is, with no script line added to it."""
    app = real.app(queue)
    keys = [app.keys.runs, app.keys.delayed, app.keys.delayed_index, app.keys.stats]
    real.sync.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError) as got:
            run(real, queue, [group(f"c{i}", NOW + 3 + i) for i in range(size)])
    finally:
        real.sync.config_set("maxmemory", 0)
    assert str(got.value) == "command not allowed when used memory > 'maxmemory'."
    assert real.sync.exists(*keys) == 0
