"""Runs dispatched by zsched 0.2 finish under the new scripts.

zsched 0.2's dispatch.lua left a run's tagged value (its due, its envelope) in `runs` and put
its entry id in the `entries` hash; now `runs` holds the entry id while the run is on the stream
(lua/lib/current.lua). A queue upgraded with runs on its stream has both kinds, and every script
and reader that asks "is this the run's current entry?" reads either: these tests turn runs
dispatched by the new script into the old form and run each of them.
"""

from __future__ import annotations

import pytest
from helpers import NOW, env, seed_ready
from state import snapshot

from zsched.protocol.envelope import decode
from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.runs import controls as C
from zsched.runs.status import get_run
from zsched.store import scripts as S
from zsched.store.delayed import tag


@pytest.fixture(params=["entries:legacy", "entries"])
def where(request) -> str:
    """Where the 0.2 entry ids are: renamed by a 0.3 dispatch (`legacy_entries`), or still in
    0.2's `entries` hash (the workers upgraded first: no 0.3 dispatch has moved runs yet)."""
    return str(request.param)


def old_hash(app, where: str) -> str:
    return app.keys.legacy_entries if where == "entries:legacy" else app.keys.entries


def as_legacy(backend, app, ent: dict[str, str], run_ids: list[str], where: str) -> None:
    """Rewrite runs to how zsched 0.2 left them on the stream: tagged value, `entries` field."""
    r = backend.sync
    if where == "entries":
        r.delete(app.keys.entries)  # the 0.3 dispatch's string: 0.2 kept a hash here
    for rid in run_ids:
        r.hset(app.keys.runs, rid, tag(NOW - 1, env(rid)))
        r.hset(old_hash(app, where), rid, ent[rid])


def test_ack_finishes_new_and_legacy_runs_in_one_call_and_fences_a_stale_legacy_entry(
    backend, queue, where
) -> None:
    app, ent = seed_ready(backend, queue, ["new", "old", "stale"])
    as_legacy(backend, app, ent, ["old", "stale"], where)
    backend.sync.hset(old_hash(app, where), "stale", "1-1")  # the run moved on to another entry
    pairs = [(ent[rid], rid) for rid in ("new", "old", "stale")]
    codes = app.scripts.run(S.ack(app.keys, "c1", pairs, now_ms=NOW, dedupe_window_ms=60_000))
    assert codes == [HoldCode.OK] * 3
    st = snapshot(backend.sync, app.keys)
    assert set(st["done"]) == {"new", "old"}
    assert set(st["runs"]) == {"stale"} and st["ready"] == [] and st["pending"] == []
    assert {
        f.decode(): v.decode() for f, v in backend.sync.hgetall(old_hash(app, where)).items()
    } == {"stale": "1-1"}


@pytest.mark.parametrize("script", ["dead", "discard"])
def test_dead_and_discard_end_a_legacy_run(backend, queue, script, where) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    as_legacy(backend, app, ent, ["a"], where)
    call = (
        S.dead(app.keys, "c1", [(ent["a"], "a", "boom", env("a"))], now_ms=NOW)
        if script == "dead"
        else C.discard(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW, dedupe_window_ms=60_000)
    )
    assert app.scripts.run(call) == [HoldCode.OK]
    r = backend.sync
    assert r.hlen(app.keys.runs) == 0 and r.hlen(old_hash(app, where)) == 0
    if script == "dead":
        assert r.xlen(app.keys.dead) == 1
    else:
        assert r.zscore(app.keys.cancelled, "a") is not None


def test_reclaim_dead_letters_a_legacy_run_past_max_deliveries(backend, queue, where) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    as_legacy(backend, app, ent, ["a"], where)
    call = S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=0, count=10, max_deliveries=0)
    app.scripts.run(call)
    r = backend.sync
    assert r.xlen(app.keys.dead) == 1
    assert r.hlen(app.keys.runs) == 0 and r.hlen(old_hash(app, where)) == 0


@pytest.mark.parametrize("legacy", [False, True])
def test_release_hands_back_the_envelope_from_the_entry_or_the_legacy_tag(
    backend, queue, legacy, where
) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    if legacy:
        as_legacy(backend, app, ent, ["a"], where)
    assert app.scripts.run(S.release(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW)) == [1]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"a": NOW} and st["ready"] == [] and st["entries"] == []
    assert st["runs"]["a"]["task"] == "t"
    assert backend.sync.hget(app.keys.runs, "a") == tag(NOW, env("a"))


def test_release_of_a_stale_entry_only_acks_it(backend, queue) -> None:
    """The run moved on to another entry: releasing the old one must not put the run back in
    the delayed set beside its entry on the stream."""
    app, ent = seed_ready(backend, queue, ["a"])
    backend.sync.hset(app.keys.runs, "a", "1-1")
    assert app.scripts.run(S.release(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW)) == [1]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {} and st["ready"] == [] and st["pending"] == []
    assert backend.sync.hget(app.keys.runs, "a") == b"1-1"


@pytest.mark.parametrize("legacy", [False, True])
def test_status_reschedule_and_revoke_read_a_run_on_the_stream_either_way(
    backend, queue, legacy, where
) -> None:
    app, ent = seed_ready(backend, queue, ["running"])
    backend.sync.xgroup_setid(app.keys.ready, GROUP, "$")  # later entries: not read yet
    app.enqueue("t", None, run_id="ready", delay=0)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW + 10**7, limit=10, max_backlog=0))
    ent["ready"] = next(
        e.decode() for e, f in backend.sync.xrange(app.keys.ready) if f[b"run_id"] == b"ready"
    )
    if legacy:
        as_legacy(backend, app, ent, ["running", "ready"], where)
    r, k = backend.sync, app.keys
    running = get_run(r, k, "running")
    assert running.state == "running" and running.consumer == "c1" and running.task == "t"
    assert get_run(r, k, "ready").state == "ready" and get_run(r, k, "ready").task == "t"
    moved = app.scripts.run(C.reschedule(k, "running", NOW + 1, now_ms=NOW))
    assert moved.outcome == C.RescheduleOutcome.RUNNING
    assert app.scripts.run(C.reschedule(k, "ready", NOW + 1, now_ms=NOW)).outcome == (
        C.RescheduleOutcome.READY
    )
    gone = app.scripts.run(C.revoke(k, "ready", now_ms=NOW, dedupe_window_ms=60_000))
    assert gone.outcome == C.CancelOutcome.CANCELLED_READY
    assert gone.envelope is not None and decode(gone.envelope, "ready").task == "t"
    assert r.hexists(k.runs, "ready") == 0
    assert not legacy or r.hexists(old_hash(app, where), "ready") == 0
    asked = app.scripts.run(C.revoke(k, "running", now_ms=NOW, dedupe_window_ms=60_000))
    assert asked.outcome == C.CancelOutcome.REQUESTED
    assert get_run(r, k, "running").cancel_requested is True
