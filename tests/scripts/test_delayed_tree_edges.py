"""Review of key layout 3 (lua/lib/btree.lua and its callers): edge cases of the delayed set.

Cases the random model test does not reach (ids with NUL, 0x00 0x01, 4-byte UTF-8 and over 64
bytes; dues of 0, past 2^47 and at the upper limit; one instant spread over many leaves;
dispatch limits; status at a leaf boundary), then four bugs a review found in the scripts
around the tree (each test failed before its fix).
"""

from __future__ import annotations

import random

import pytest
from helpers import NOW, env, seed_delayed, seed_ready
from state import delayed_count, snapshot

from zsched.protocol.replies import CancelCode, EnqueueCode
from zsched.store import delayed
from zsched.store import scripts as S

MAX = 64
FAR = 253_402_300_799_999  # the largest run_at_ms enqueue accepts


def key(due: int, rid: str) -> bytes:
    return b"%015d" % due + rid.encode().replace(b"\0", b"\0\1") + b"\0\0"


def check(backend, k, model: dict[str, int]) -> None:
    """The tree's invariant (as test_delayed_tree.check_tree, any encoding), count and tags."""
    r = backend.sync
    index = r.zrange(k.delayed_index, 0, -1)
    bounds = [m[: m.index(b"\0\0", 15) + 2] for m in index]
    assert bounds == sorted(bounds)
    seen: dict[str, int] = {}
    for i, m in enumerate(index):
        rows = r.zrange(k.delayed_leaf(delayed.leaf_number(m)), 0, -1, withscores=True)
        assert 0 < len(rows) <= MAX
        for rid_b, due in rows:
            rk = key(int(due), rid_b.decode())
            assert bounds[i] <= rk and (i + 1 == len(bounds) or rk < bounds[i + 1])
            assert rid_b.decode() not in seen, "a run id in two leaves"
            seen[rid_b.decode()] = int(due)
    assert seen == model
    assert delayed_count(r, k) == len(model)
    for rid, due in model.items():
        assert delayed.untag(r.hget(k.runs, rid))[0] == due


def enqueue(app, runs: dict[str, int], now: int = NOW) -> list[int]:
    batch = [(rid, at, "t", env("x")) for rid, at in runs.items()]
    return app.scripts.run(S.enqueue(app.keys, batch, now_ms=now, dedupe_window_ms=1,
                                     max_envelope_bytes=10_000))  # fmt: skip


def odd_id(rnd: random.Random, n: int) -> str:
    return rnd.choice([
        f"n\0{n}", f"n\0\1{n}", f"n{n}\0", f"n{n}\0\0\1", f"\0{n}", f"\1{n}",
        f"\U0010ffff{n}", f"\u07ff{n}", f"L{n}" + "\0" * 300, f"L{n}" + "é" * 200,
    ])  # fmt: skip


def test_odd_ids_and_extreme_dues_keep_the_tree_and_dispatch_in_order(backend, queue) -> None:
    """NUL, 0x00 0x01, 4-byte UTF-8 and long (skiplist) ids; dues 0, 2^47 + 1 and the upper
    limit; one instant over many leaves; cancel of each kind; dispatch limit 1, then > size."""
    rnd = random.Random(11)
    app = backend.app(queue)
    k = app.keys
    dues = [0, 1, NOW, NOW, NOW, 2**47 + 1, 10**14 - 1, 10**14, FAR]
    model = {odd_id(rnd, n): rnd.choice(dues) for n in range(900)}
    assert enqueue(app, model) == [EnqueueCode.ENQUEUED] * len(model)
    assert backend.sync.zcard(k.delayed_index) > 10
    check(backend, k, model)
    for rid in rnd.sample(sorted(model), 300):
        assert app.scripts.run(S.cancel(k, rid)) == CancelCode.CANCELLED
        del model[rid]
    check(backend, k, model)
    res = app.scripts.run(S.dispatch(k, now_ms=NOW, limit=1, max_backlog=0))
    first = min(model, key=lambda rid: key(model[rid], rid))
    assert res.moved == 1 and res.run_at_ms == [model.pop(first)]
    res = app.scripts.run(S.dispatch(k, now_ms=FAR, limit=1000, max_backlog=0))
    want = sorted(model, key=lambda rid: key(model[rid], rid))
    got = [f[b"run_id"].decode() for _, f in backend.sync.xrange(k.ready)][1:]
    assert got == want and res.run_at_ms == [model[r] for r in want] and res.next_due_ms is None
    check(backend, k, {})
    assert backend.sync.zcard(k.delayed_index) == 0


def test_status_is_exact_when_now_is_the_bound_of_a_leaf(backend, queue) -> None:
    """Runs of one instant over several leaves: leaves whose bound is due at now count whole."""
    app = backend.app(queue)
    k = app.keys
    enqueue(app, {f"a{i:04d}": NOW + (i // 100) for i in range(1000)})  # 10 instants
    check(backend, k, {f"a{i:04d}": NOW + (i // 100) for i in range(1000)})
    for at in (NOW - 1, NOW, NOW + 4, NOW + 9):
        for max_leaves in (1000, 2):
            _, _, size, due, head, exact = app.scripts.run(
                S.status(k, now_ms=at, max_leaves=max_leaves)
            )
            assert (size, head) == (1000, NOW)
            assert not exact or due == max(0, min(1000, (at - NOW + 1) * 100)), (at, max_leaves)


# -- found in review ----------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [10**15, "nan"])
def test_retry_refuses_a_delay_past_the_due_tag_range_before_writing(backend, queue, delay) -> None:
    """retry.lua refuses, before writing anything, a delay that puts the due past 9999-12-31
    (10**15: bt_tag failed in string.char after this call had already taken the earlier runs
    off the stream, so they were lost) or NaN (the run went into the tree with score -2^63)."""
    app, ent = seed_ready(backend, queue, ["a", "b"])
    k = app.keys
    before = snapshot(backend.sync, k)
    groups = [(ent["a"], "a", 1000, env("a", attempt=2)), (ent["b"], "b", delay, env("b"))]
    with pytest.raises(Exception, match="zsched retry: run b: delay_ms"):
        app.scripts.run(S.retry(k, "c1", groups, now_ms=NOW))
    assert snapshot(backend.sync, k) == before, "a refused batch must write nothing"


def test_migrate_skips_a_run_that_the_tree_already_holds(backend, queue) -> None:
    """An id of the old set without a value in `runs` is dropped, also when it was enqueued
    again (into the tree) before migrate reached it: migrate added it a second time at the old
    due, retagging it (n one too many, or the id in two leaves)."""
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    r.zadd(k.delayed, {"a": NOW, "gone": NOW + 10})
    r.hset(k.runs, "a", env("a"))  # "gone" has no value: layout 2 left it behind
    assert app.scripts.run(S.migrate(k, batch=1)) == (1, 1)
    assert enqueue(app, {"gone": NOW + 5000}) == [EnqueueCode.ENQUEUED]
    app.migrate()
    check(backend, k, {"a": NOW, "gone": NOW + 5000})


def test_cancel_of_a_run_still_in_the_layout_2_set(backend, queue) -> None:
    """While migrate moves a layout 2 set, a run not yet moved (untagged value) is cancelled
    in the old set; cancel answered 2 ("already on the ready stream") and the run was then
    moved and dispatched anyway."""
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    r.zadd(k.delayed, {"a": NOW, "b": NOW + 1})
    r.hset(k.runs, mapping={"a": env("a"), "b": env("b")})
    assert app.scripts.run(S.migrate(k, batch=1)) == (1, 1)
    assert app.scripts.run(S.cancel(k, "b")) == CancelCode.CANCELLED
    app.migrate()
    check(backend, k, {"a": NOW})


def test_unlease_does_not_start_a_waiting_fire_whose_id_is_live(backend, queue) -> None:
    """A waiting fire whose run id is live again when the lease frees (enqueued by hand
    meanwhile) is dropped: unlease replaced the live run's envelope and added the id again
    (moved to now, n counting 3 runs in 2)."""
    app = seed_delayed(backend, queue, {"s1@x": NOW + 100_000, "y": NOW + 5})
    k = app.keys
    backend.sync.hset(k.rule_waiting, "s1", b"4:s1@x" + env("s1@x"))
    app.scripts.run(S.unlease(k, "s1", "old", 1000, now_ms=NOW, dedupe_window_ms=3_600_000))
    check(backend, k, {"s1@x": NOW + 100_000, "y": NOW + 5})


@pytest.mark.parametrize(("done_ago_ms", "started"), [(1_000, False), (7_200_000, True)])
def test_unlease_does_not_start_a_waiting_fire_whose_id_is_done(backend, queue, done_ago_ms,
                                                                started) -> None:  # fmt: skip
    """Found by the model's state machine: a manual fire waited (overlap queue) while a forced
    manual fire of the same instant, same run id, ran; both ended at one instant and unlease
    started the waiting fire again, a second run of that id. A waiting fire whose id is done
    within the dedupe window is dropped (as fire.lua drops it); past the window it starts."""
    app = seed_delayed(backend, queue, {"y": NOW + 5})
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), "old")
    r.hset(k.rule_waiting, "s1", b"4:s1@x" + env("s1@x"))
    r.zadd(k.done, {"s1@x": NOW - done_ago_ms})
    released, got = app.scripts.run(S.unlease(k, "s1", "old", 1000, now_ms=NOW,
                                              dedupe_window_ms=3_600_000))  # fmt: skip
    assert released and got == ("s1@x" if started else "")
    assert not r.hexists(k.rule_waiting, "s1")
    assert (r.get(k.lease("s1")) is not None) == started
    check(backend, k, {"s1@x": NOW, "y": NOW + 5} if started else {"y": NOW + 5})
