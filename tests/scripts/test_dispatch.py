"""dispatch.lua: due runs move to the stream in bounded batches; nothing else moves."""

from __future__ import annotations

import pytest
import redis
from helpers import NOW, seed_delayed
from state import delayed_due, snapshot

from zsched.protocol.envelope import decode
from zsched.store import scripts as S
from zsched.store.replies import entry_payload


def dispatch(app, now=NOW, limit=100, max_backlog=0):
    return app.scripts.run(S.dispatch(app.keys, now_ms=now, limit=limit, max_backlog=max_backlog))


def test_dispatch_moves_only_due_runs(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"past": NOW - 5, "now": NOW, "future": NOW + 1})
    r = dispatch(app)
    assert (r.moved, r.next_due_ms, r.now_ms, r.backlogged) == (2, NOW + 1, NOW, False)
    assert sorted(r.run_at_ms) == [NOW - 5, NOW]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"future": NOW + 1}
    assert sorted(e["run_id"] for e in st["ready"]) == ["now", "past"]
    assert st["ready"][0]["due_ms"] == str(NOW - 5)
    assert st["entries"] == ["now", "past"]
    assert set(st["runs"]) == {"past", "now", "future"}
    assert st["stats"]["dispatched"] == 2


def test_stream_entry_carries_the_envelope(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW})
    dispatch(app)
    ((_, fields),) = backend.sync.xrange(app.keys.ready)
    assert fields[b"run_id"] == b"a"
    assert decode(entry_payload(fields)[0], "a").run_id == "a"


def test_dispatch_moves_at_most_limit_runs_oldest_first(backend, queue) -> None:
    app = seed_delayed(backend, queue, {f"r{i}": NOW - 100 + i for i in range(10)})
    r = dispatch(app, limit=3)
    assert r.moved == 3 and r.next_due_ms == NOW - 97
    assert [e["run_id"] for e in snapshot(backend.sync, app.keys)["ready"]] == ["r0", "r1", "r2"]


def test_dispatch_holds_back_while_the_backlog_is_full(backend, queue) -> None:
    app = seed_delayed(backend, queue, {f"r{i}": NOW for i in range(5)})
    r = dispatch(app, max_backlog=2)
    assert (r.moved, r.backlogged) == (2, False)
    r = dispatch(app, max_backlog=2)
    assert (r.moved, r.backlogged) == (0, True)
    assert len(snapshot(backend.sync, app.keys)["delayed"]) == 3


def test_empty_queue_reports_no_next_due(backend, queue) -> None:
    r = dispatch(backend.app(queue))
    assert (r.moved, r.next_due_ms) == (0, None)


def test_dispatch_twice_never_moves_a_run_twice(backend, queue) -> None:
    app = seed_delayed(backend, queue, {f"r{i}": NOW for i in range(50)})
    assert dispatch(app).moved + dispatch(app).moved == 50
    assert backend.sync.xlen(app.keys.ready) == 50


@pytest.mark.parametrize("limit", [0, 1001, "x"])
def test_bad_limit_is_an_error(backend, queue, limit) -> None:
    app = backend.app(queue)
    with pytest.raises(redis.ResponseError, match="limit must be 1..1000"):
        app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=limit, max_backlog=0))


@pytest.mark.parametrize("key", ["ready", "runs", "stats", "control"])
def test_wrong_type_key_fails_before_anything_moves(backend, queue, key) -> None:
    app = seed_delayed(backend, queue, {"a": NOW})
    backend.sync.set(getattr(app.keys, key), "oops")
    with pytest.raises(redis.ResponseError, match=f"WRONGTYPE zsched dispatch: key .*{key}"):
        dispatch(app)
    assert delayed_due(backend.sync, app.keys, "a") == NOW


def test_dispatch_sends_each_due_exactly_from_its_tag_up_to_year_9999(backend, queue) -> None:
    """dispatch.lua reads a run's due from the tag of its value in `runs`, not from the leaf's
    score: the stream's due_ms and the reply carry it digit for digit."""
    last = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the latest due enqueue takes
    dues = {"zero": 0, "now": NOW, "odd": 2**40 + 255, "last": last}
    app = seed_delayed(backend, queue, dues)
    r = dispatch(app, now=last)
    assert sorted(r.run_at_ms) == sorted(dues.values())
    st = snapshot(backend.sync, app.keys)
    assert {e["run_id"]: e["due_ms"] for e in st["ready"]} == {k: str(v) for k, v in dues.items()}


def test_a_dispatched_run_is_known_in_runs_by_its_entry_id_and_entries_is_not_written(
    backend, queue
) -> None:
    """dispatch.lua writes each moved run's entry id over its value in `runs` (the envelope
    is in the entry), a field overwritten, not added: `runs` keeps its size and no
    `entries` hash is made (zsched 0.2 kept one, BENCHMARKS.md "Session 22"): `entries` holds
    a string instead, which 0.2's scripts refuse."""
    ids = [f"r{i:03d}" for i in range(70)]
    app = seed_delayed(backend, queue, dict.fromkeys(ids, NOW - 1))
    app.enqueue("t", None, run_id="later", delay=3600)
    r = backend.sync
    assert dispatch(app, limit=70).moved == 70
    values = {f.decode(): v for f, v in r.hgetall(app.keys.runs).items()}
    stream = {f[b"run_id"].decode(): e.decode() for e, f in r.xrange(app.keys.ready)}
    assert {rid: values[rid].decode() for rid in ids} == stream
    assert values["later"][:1] == b"\0"  # still delayed: its due tag and envelope
    assert r.type(app.keys.entries) == b"string" and r.exists(app.keys.legacy_entries) == 0
    st = snapshot(r, app.keys)
    assert st["entries"] == ids and st["runs"]["r000"]["task"] == "t"
