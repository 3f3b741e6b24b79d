"""The delayed set of key layout 3 (lua/lib/btree.lua): a B-tree of small ZSETs.

A random model test drives enqueue, cancel and dispatch through the real scripts and checks,
after every step, the tree's invariant (each leaf non-empty, at most 64 runs, a listpack on
a real server, its runs between its bound and the next one), its count, and that it holds
exactly the runs of a plain model, dispatched in (due, run id) byte order.
"""

from __future__ import annotations

import random

import pytest
from helpers import NOW, env
from state import delayed_count

from zsched.protocol.replies import CancelCode, EnqueueCode
from zsched.store import delayed
from zsched.store import scripts as S
from zsched.store.luagen import stale
from zsched.store.replies import entry_payload

MAX = 64


def key(due: int, rid: str) -> bytes:
    return b"%015d" % due + rid.encode().replace(b"\0", b"\0\1") + b"\0\0"


def check_tree(backend, k, model: dict[str, int]) -> None:
    r = backend.sync
    index = r.zrange(k.delayed_index, 0, -1, withscores=True)
    assert all(score == 0 for _, score in index)
    bounds = [m[: m.index(b"\0\0", 15) + 2] for m, _ in index]
    assert bounds == sorted(bounds), "index members out of order"
    seen: dict[str, int] = {}
    for i, (m, _) in enumerate(index):
        leaf = k.delayed_leaf(delayed.leaf_number(m))
        rows = r.zrange(leaf, 0, -1, withscores=True)
        assert 0 < len(rows) <= MAX, f"leaf {leaf} holds {len(rows)} runs"
        if backend.name == "redis":
            assert r.object("encoding", leaf) == b"listpack"
        for rid_b, due in rows:
            rk = key(int(due), rid_b.decode())
            assert rk >= bounds[i], "a run sorts before its leaf's bound"
            assert i + 1 == len(bounds) or rk < bounds[i + 1], "a run belongs to the next leaf"
            seen[rid_b.decode()] = int(due)
    assert seen == model
    assert delayed_count(r, k) == len(model)
    for rid, due in model.items():  # each delayed run's value carries its due, as documented
        value = r.hget(k.runs, rid)
        assert value == delayed.tag(due, delayed.untag(value)[1])


def run_id(rnd: random.Random, n: int) -> str:
    kind = rnd.randrange(4)
    if kind == 0:
        return f"r{n:06d}"
    if kind == 1:
        return f"x\0{n}|" + "\0" * rnd.randrange(3)
    if kind == 2:
        return f"é{n}ü"
    return f"{rnd.choice('-_AZaz09')}{n}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_enqueue_cancel_dispatch_keep_the_tree_and_its_order(backend, queue, seed) -> None:
    rnd = random.Random(seed)
    app = backend.app(queue)
    k = app.keys
    model: dict[str, int] = {}
    now, n = NOW, 0
    for _step in range(30):
        op = rnd.random()
        if op < 0.5:
            burst = rnd.random() < 0.3
            batch = []
            for _ in range(rnd.randrange(1, 300)):
                n += 1
                due = now + (500 if burst else rnd.randrange(-50, 2000))
                batch.append((run_id(rnd, n), due, "t", env("x")))
            if rnd.random() < 0.5:
                batch.sort(key=lambda g: key(g[1], g[0]))  # in order: the rightmost split
            codes = app.scripts.run(S.enqueue(k, batch, now_ms=now, dedupe_window_ms=1,
                                              max_envelope_bytes=10_000))  # fmt: skip
            assert codes == [EnqueueCode.ENQUEUED] * len(batch)
            model.update({rid: due for rid, due, _, _ in batch})
        elif op < 0.7 and model:
            for rid in rnd.sample(sorted(model), min(len(model), rnd.randrange(1, 40))):
                assert app.scripts.run(S.cancel(k, rid)) == CancelCode.CANCELLED
                del model[rid]
        else:
            now += rnd.randrange(0, 800)
            limit = rnd.choice([1, 7, 100, 1000])
            res = app.scripts.run(S.dispatch(k, now_ms=now, limit=limit, max_backlog=0))
            due = sorted((key(d, rid), rid) for rid, d in model.items() if d <= now)[:limit]
            rows = backend.sync.xrange(k.ready)[-res.moved :] if res.moved else []
            assert [f[b"run_id"].decode() for _, f in rows] == [rid for _, rid in due]
            assert res.run_at_ms == [model[rid] for _, rid in due]
            for _, rid in due:
                del model[rid]
            head = min(model.values(), default=None)
            assert res.next_due_ms == head
        check_tree(backend, k, model)


def test_big_batches_in_random_order_walk_many_leaves_and_split_them(backend, queue) -> None:
    rnd = random.Random(5)
    app = backend.app(queue)
    model: dict[str, int] = {}
    for b in range(6):
        batch = [(f"b{b}-{i}", NOW + rnd.randrange(5000), "t", env("x")) for i in range(1000)]
        if b == 3:  # many runs at one instant among the others: ties broken by id
            batch = [(rid, NOW + 2500, t, e) for rid, _, t, e in batch]
        app.scripts.run(S.enqueue(app.keys, batch, now_ms=NOW, dedupe_window_ms=1,
                                  max_envelope_bytes=999))  # fmt: skip
        model.update({rid: due for rid, due, _, _ in batch})
        check_tree(backend, app.keys, model)
    assert backend.sync.zcard(app.keys.delayed_index) > 100


def test_enqueue_many_sends_runs_in_due_order_and_answers_in_the_callers(backend, queue) -> None:
    """enqueue_many sorts each call's runs by (due, id) so the script need not; the ids and
    duplicate flags still come back in the caller's order, and the first of two equal ids
    wins (then nothing is reordered)."""
    app = backend.app(queue)
    rnd = random.Random(3)
    dues = [NOW + rnd.randrange(10**6) for _ in range(250)]
    items = [{"task": "t", "payload": i, "run_id": f"r{i}", "run_at": d / 1000}
             for i, d in enumerate(dues)]  # fmt: skip
    got = app.enqueue_many(items)
    assert [g for g in got] == [f"r{i}" for i in range(250)] and not any(g.duplicate for g in got)
    check_tree(backend, app.keys, {f"r{i}": d for i, d in enumerate(dues)})
    again = app.enqueue_many([{"task": "t", "run_id": "x", "run_at": (NOW + 5) / 1000},
                              {"task": "t", "run_id": "x", "run_at": (NOW + 1) / 1000},
                              {"task": "t", "run_id": "r3", "run_at": NOW / 1000}])  # fmt: skip
    assert [g.duplicate for g in again] == [False, True, True]
    assert app.get_run("x").run_at.timestamp() * 1000 == NOW + 5


@pytest.mark.parametrize("in_order", [True, False], ids=["in order", "shuffled"])
def test_a_big_batch_with_duplicates_of_every_kind_adds_only_its_new_runs(
    backend, queue, in_order
) -> None:
    """The new runs go to the tree as the batch's own arrays until the first duplicate, then
    as copies: duplicates early, late and in a row (live, done, twice in the batch)."""
    app = backend.app(queue)
    k = app.keys
    app.scripts.run(S.enqueue(k, [("live-0", NOW + 5, "t", env("x")), ("live-1", NOW + 9, "t", env("x"))],
                              now_ms=NOW, dedupe_window_ms=60_000, max_envelope_bytes=999))  # fmt: skip
    backend.sync.zadd(k.done, {"done-0": NOW - 10})
    rnd = random.Random(9)
    batch = [(f"n{i:03d}", NOW + 100 + i, "t", env("x")) for i in range(300)]
    batch[3] = ("live-0", NOW + 1, "t", env("x"))
    batch[150] = ("done-0", NOW + 1, "t", env("x"))
    batch[151] = ("n005", NOW + 1, "t", env("x"))  # twice in the batch: the first wins
    batch[299] = ("live-1", NOW + 1, "t", env("x"))
    if not in_order:
        rnd.shuffle(batch)
    codes = app.scripts.run(S.enqueue(k, batch, now_ms=NOW, dedupe_window_ms=60_000,
                                      max_envelope_bytes=999))  # fmt: skip
    want = {"live-0": EnqueueCode.DUPLICATE_LIVE, "live-1": EnqueueCode.DUPLICATE_LIVE,
            "done-0": EnqueueCode.DUPLICATE_DONE}  # fmt: skip
    first: dict[str, int] = {}
    for i, (rid, due, _, _) in enumerate(batch):
        if rid in want:
            assert codes[i] == want[rid]
        elif rid in first:
            assert codes[i] == EnqueueCode.DUPLICATE_LIVE
        else:
            first[rid] = due
            assert codes[i] == EnqueueCode.ENQUEUED
    check_tree(backend, k, {"live-0": NOW + 5, "live-1": NOW + 9} | first)
    stats = backend.sync.hgetall(k.stats)
    assert int(stats[b"enqueued"]) == 2 + len(first) == 2 + 296
    assert (int(stats[b"duplicate:live"]), int(stats[b"duplicate:done"])) == (3, 1)


def test_cancel_tells_a_dispatched_run_from_a_delayed_and_an_unknown_one(backend, queue) -> None:
    app = backend.app(queue)
    k = app.keys
    batch = [(f"r{i}", NOW + i, "t", env("x")) for i in range(3)]
    app.scripts.run(S.enqueue(k, batch, now_ms=NOW, dedupe_window_ms=1, max_envelope_bytes=999))
    app.scripts.run(S.dispatch(k, now_ms=NOW, limit=10, max_backlog=0))
    assert app.scripts.run(S.cancel(k, "r0")) == CancelCode.NOT_CANCELLABLE  # on the stream
    assert app.scripts.run(S.cancel(k, "r1")) == CancelCode.CANCELLED
    assert app.scripts.run(S.cancel(k, "r1")) == CancelCode.NOT_FOUND
    assert app.scripts.run(S.cancel(k, "nope")) == CancelCode.NOT_FOUND
    check_tree(backend, k, {"r2": NOW + 2})
    ((_, fields),) = backend.sync.xrange(k.ready)
    assert entry_payload(fields) == (env("x"), NOW), "the entry's envelope and due"


def test_status_counts_due_runs_exactly_from_either_end_and_estimates_beyond(
    backend, queue
) -> None:
    app = backend.app(queue)
    k = app.keys
    batch = [(f"r{i:05d}", NOW + i, "t", env("x")) for i in range(2000)]  # ~16 leaves
    for part in (batch[:1000], batch[1000:]):
        app.scripts.run(S.enqueue(k, part, now_ms=NOW, dedupe_window_ms=1, max_envelope_bytes=99))
    leaves = backend.sync.zcard(k.delayed_index)
    for at in (NOW - 1, NOW, NOW + 130, NOW + 1000, NOW + 1999, NOW + 5000):
        want = max(0, min(2000, at - NOW + 1))
        for max_leaves in (1000, 3, 1):
            sec, usec, size, due, head, exact = app.scripts.run(
                S.status(k, now_ms=at, max_leaves=max_leaves)
            )
            assert (size, head) == (2000, NOW)
            if exact:
                assert due == want, (at, max_leaves)
            else:  # both sides over max_leaves: estimated from the share of due leaves
                assert max_leaves < leaves and abs(due - want) <= 2 * MAX, (at, due, want)
            assert exact or max_leaves == 1 or at in (NOW + 1000,)


def test_migrate_moves_a_layout_2_set_into_the_tree_while_it_runs(backend, queue) -> None:
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    # What zsched 0.1 left behind: one ZSET of run ids and untagged envelopes in `runs`.
    old = {f"o{i}": NOW + i for i in range(2500)}
    r.zadd(k.delayed, old)
    r.hset(k.runs, mapping={rid: env(rid) for rid in old})
    r.zadd(k.delayed, {"orphan": NOW})  # an id without an envelope is dropped
    with pytest.raises(Exception, match="key layout 2; run `zsched migrate`"):
        app.scripts.run(S.enqueue(k, [("n", NOW, "t", env("n"))], now_ms=NOW,
                                  dedupe_window_ms=1, max_envelope_bytes=999))  # fmt: skip
    assert app.scripts.run(S.migrate(k, batch=1000)) == (999, 1501)
    # The queue runs during the move: new runs go to the tree.
    app.scripts.run(S.enqueue(k, [("n", NOW, "t", env("n"))], now_ms=NOW,
                              dedupe_window_ms=1, max_envelope_bytes=999))  # fmt: skip
    assert app.migrate() == 1501
    assert app.migrate() == 0
    check_tree(backend, k, {**old, "n": NOW})
    assert r.exists(k.delayed + ":layout2") == 0


def test_every_script_carries_the_current_shared_block() -> None:
    assert stale() == [], "run `make lua`"


_LESS = """
-- BEGIN btree
-- END btree
local out = {}
for i = 1, #ARGV, 2 do out[#out + 1] = bt_less(ARGV[i], ARGV[i + 1]) and 1 or 0 end
return out
"""


@pytest.mark.parametrize("native", [True, False])
def test_keys_compare_in_byte_order_with_or_without_the_locale(backend, native) -> None:
    """bt_less is byte order (as Redis orders members), by `<` in a C locale or byte by byte
    (forced here: no other locale is installed on this machine to run Redis under)."""
    from zsched.store.luagen import expand
    from zsched.store.scripts import lua_dir

    src = expand(_LESS, lua_dir() / "lib")
    if not native:
        src = src.replace("local BT_NATIVE = ", "local BT_NATIVE = false and ", 1)
    rnd = random.Random(7)
    alphabet = [
        b"\0",
        b"\1",
        b"-",
        b"0",
        b"9",
        b"A",
        b"Z",
        b"_",
        b"a",
        b"z",
        b"\x7f",
        b"\xc3\xa9",
        b"\xff",
    ]
    pairs = []
    for _ in range(400):
        x = b"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 20)))
        y = x[: rnd.randrange(0, len(x) + 1)] + b"".join(
            rnd.choice(alphabet) for _ in range(rnd.randrange(0, 4))
        )
        pairs.append((x, y) if rnd.random() < 0.5 else (y, x))
    got = backend.sync.eval(src, 0, *[s for p in pairs for s in p])
    assert got == [int(x < y) for x, y in pairs]
