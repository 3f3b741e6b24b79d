"""A run on the stream is known in `runs` by its entry id (lua/lib/current.lua): the scripts
that read a value of `runs` must not take that id for an envelope of key layout 2, for a
delayed run, or a stale entry for the current one. And zsched 0.2's `entries` hash moves
aside on the first dispatch, leaving a string that 0.2's scripts refuse. Several of these
come from a review of 8af3b73 (each failed there)."""

from __future__ import annotations

import pytest
import redis
from helpers import NOW, env, seed_ready
from state import add_delayed, snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import CancelCode
from zsched.runs import controls as C
from zsched.store import scripts as S
from zsched.store.delayed import tag


def _stale_layout2_member_then_dispatched(backend, queue):
    """Migration under way; "gone" is a member of the old set with no value (layout 2 left it
    behind, as in test_migrate_skips_a_run_that_the_tree_already_holds), then "gone" is
    enqueued again into the tree and dispatched and read before migrate reaches it."""
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    r.zadd(k.delayed, {"a": NOW, "gone": NOW + 10})
    r.hset(k.runs, "a", env("a"))
    assert app.scripts.run(S.migrate(k, batch=1)) == (1, 1)  # "gone" still in delayed:layout2
    seed = [("gone", NOW - 1, "t", env("gone"))]
    app.scripts.run(S.enqueue(k, seed, now_ms=NOW, dedupe_window_ms=1, max_envelope_bytes=10_000))
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(k, now_ms=NOW, limit=1000, max_backlog=0))
    rows = r.xreadgroup(GROUP, "c1", {k.ready: ">"}, count=1000)
    ent = {f[b"run_id"].decode(): e.decode() for e, f in rows[0][1]}
    assert r.hget(k.runs, "gone") == ent["gone"].encode()
    return app, k, r, ent


def test_migrate_does_not_take_a_run_on_the_stream_for_a_layout_2_run(backend, queue) -> None:
    app, k, r, ent = _stale_layout2_member_then_dispatched(backend, queue)
    app.migrate()
    assert r.hget(k.runs, "gone") == ent["gone"].encode()
    assert "gone" not in snapshot(r, k)["delayed"]


def test_cancel_does_not_remove_a_run_on_the_stream(backend, queue) -> None:
    app, k, r, ent = _stale_layout2_member_then_dispatched(backend, queue)
    assert app.scripts.run(S.cancel(k, "gone")) == CancelCode.NOT_CANCELLABLE
    assert r.hget(k.runs, "gone") == ent["gone"].encode()


def test_revoke_of_a_running_run_asks_its_worker(backend, queue) -> None:
    app, k, r, ent = _stale_layout2_member_then_dispatched(backend, queue)
    res = app.scripts.run(C.revoke(k, "gone", now_ms=NOW, dedupe_window_ms=60_000))
    assert res.outcome == C.CancelOutcome.REQUESTED, (res, r.hget(k.runs, "gone"))


def test_reschedule_of_a_running_run_is_refused(backend, queue) -> None:
    app, k, r, ent = _stale_layout2_member_then_dispatched(backend, queue)
    res = app.scripts.run(C.reschedule(k, "gone", NOW + 5, now_ms=NOW))
    assert res.outcome == C.RescheduleOutcome.RUNNING, res


def _delayed_again(backend, app) -> None:
    """"a" waits in the delayed set again (as a retry leaves it) while its old entry is still
    pending with c1."""
    r, k = backend.sync, app.keys
    r.hdel(k.runs, "a")
    app.scripts.run(S.enqueue(k, [("a", NOW + 60_000, "t", env("a"))], now_ms=NOW,
                              dedupe_window_ms=1, max_envelope_bytes=10_000))  # fmt: skip


@pytest.mark.parametrize("script", ["release", "retry"])
def test_a_stale_entry_of_a_run_back_in_the_tree_is_only_acked(backend, queue, script) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    r, k = backend.sync, app.keys
    _delayed_again(backend, app)
    call = (
        S.release(k, "c1", [(ent["a"], "a")], now_ms=NOW)
        if script == "release"
        else S.retry(k, "c1", [(ent["a"], "a", 0, env("a", attempt=2))], now_ms=NOW)
    )
    assert app.scripts.run(call) == [1]
    st = snapshot(r, k)
    assert st["delayed"] == {"a": NOW + 60_000} and int(r.hget(k.delayed, "n")) == 1
    assert st["ready"] == [] and st["pending"] == [] and st["runs"]["a"].get("attempt", 1) == 1


@pytest.mark.parametrize("script", ["release", "retry"])
def test_a_stale_legacy_entry_is_only_acked(backend, queue, script) -> None:
    """A 0.2 run whose `entries` names another entry (it moved on)."""
    app, ent = seed_ready(backend, queue, ["a"])
    r, k = backend.sync, app.keys
    r.hset(k.runs, "a", tag(NOW - 1, env("a")))
    r.hset(k.legacy_entries, "a", "1-1")  # its current entry
    call = (
        S.release(k, "c1", [(ent["a"], "a")], now_ms=NOW)
        if script == "release"
        else S.retry(k, "c1", [(ent["a"], "a", 0, env("a", attempt=2))], now_ms=NOW)
    )
    assert app.scripts.run(call) == [1]
    assert snapshot(r, k)["delayed"] == {}
    assert r.hget(k.legacy_entries, "a") == b"1-1"


def test_the_first_dispatch_moves_the_02_entries_aside_and_leaves_a_string(backend, queue) -> None:
    """zsched 0.2's scripts check `entries` is a hash (or read it as one) before they write:
    once it holds a string they are refused with WRONGTYPE instead of acting on runs they
    cannot read. Its runs on the stream move to `legacy_entries` and still finish."""
    app, ent = seed_ready(backend, queue, ["old"])
    r, k = backend.sync, app.keys
    # As zsched 0.2 left it: a tagged value, the entry id in the `entries` hash.
    r.delete(k.entries)
    r.hset(k.runs, "old", tag(NOW - 1, env("old")))
    r.hset(k.entries, "old", ent["old"])
    app.enqueue("t", None, run_id="new", delay=0)
    app.scripts.run(S.dispatch(k, now_ms=NOW + 10**7, limit=10, max_backlog=0))
    assert r.type(k.entries) == b"string"
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.hget(k.entries, "old")
    assert r.hgetall(k.legacy_entries) == {b"old": ent["old"].encode()}
    codes = app.scripts.run(S.ack(k, "c1", [(ent["old"], "old")], now_ms=NOW,
                                  dedupe_window_ms=60_000))  # fmt: skip
    assert codes == [1] and r.exists(k.legacy_entries) == 0
    assert r.zscore(k.done, "old") == NOW and set(snapshot(r, k)["runs"]) == {"new"}


def test_a_tree_member_whose_value_is_an_entry_id_is_dropped_as_an_orphan(backend, queue) -> None:
    """Cannot happen through the scripts: a run id in the tree whose value says it is on the
    stream already. dispatch.lua counts it as an orphan instead of sending the id as an
    envelope."""
    app, ent = seed_ready(backend, queue, ["a"])
    r, k = backend.sync, app.keys
    add_delayed(r, k, {"a": NOW - 1})
    moved = app.scripts.run(S.dispatch(k, now_ms=NOW, limit=10, max_backlog=0))
    assert moved.moved == 0 and int(r.hget(k.stats, "orphan")) == 1
    assert r.hget(k.runs, "a") == ent["a"].encode() and r.xlen(k.ready) == 1


@pytest.mark.parametrize("script", ["release", "retry", "dead", "discard"])
@pytest.mark.parametrize("spelling", ["ms", "leading zero"])
def test_an_entry_id_spelled_otherwise_than_redis_writes_it_is_refused(
    backend, queue, script, spelling
) -> None:
    """XPENDING finds entry "<ms>-0" by "<ms>" or "0<ms>-0" too, but the run's value names
    it "<ms>-0": compared as strings, the current entry would read as stale (acked, its run
    left live). From a review of 24de3b4, where release and retry did so."""
    app, ent = seed_ready(backend, queue, ["a"])
    r, k = backend.sync, app.keys
    ms, seq = ent["a"].split("-")
    other = ms if spelling == "ms" else f"0{ms}-{seq}"
    calls = {
        "release": S.release(k, "c1", [(other, "a")], now_ms=NOW),
        "retry": S.retry(k, "c1", [(other, "a", 0, env("a", attempt=2))], now_ms=NOW),
        "dead": S.dead(k, "c1", [(other, "a", "boom", env("a"))], now_ms=NOW),
        "discard": C.discard(k, "c1", [(other, "a")], now_ms=NOW, dedupe_window_ms=60_000),
    }
    before = snapshot(r, k)
    with pytest.raises(redis.ResponseError, match="is not written as Redis writes it"):
        app.scripts.run(calls[script])
    assert snapshot(r, k) == before
