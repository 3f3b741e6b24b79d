"""revoke.lua and discard.lua: cancel tells every place apart; delayed and ready runs go at
once, a running run gets a request its worker ends with discard.lua; a cancelled run reads as
`cancelled` and its id can be enqueued again."""

from __future__ import annotations

import pytest
from helpers import NOW, seed_delayed, seed_ready

from zsched import CancelOutcome, EnqueueOutcome
from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.runs import controls as C
from zsched.store import scripts as S


def test_a_delayed_run_is_removed_and_reads_as_cancelled(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 60_000})
    res = app.cancel("a")
    assert (res.outcome, bool(res), res.cancelled, res.requested) == (
        CancelOutcome.CANCELLED_DELAYED, True, True, False)  # fmt: skip
    assert not backend.sync.hexists(app.keys.runs, "a")
    assert int(backend.sync.hget(app.keys.delayed, "n")) == 0
    assert app.get_run("a").state == "cancelled"
    again = app.cancel("a")
    assert (again.outcome, bool(again)) == (CancelOutcome.ALREADY_CANCELLED, False)
    assert app.enqueue("t", None, run_id="a", delay=5).outcome is EnqueueOutcome.ENQUEUED
    assert app.get_run("a").state == "scheduled"


def test_a_ready_run_nobody_read_leaves_the_stream(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"r": NOW - 1})
    backend.sync.xgroup_create(app.keys.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=10, max_backlog=0))
    assert app.cancel("r").outcome is CancelOutcome.CANCELLED_READY
    assert backend.sync.xlen(app.keys.ready) == 0
    assert not backend.sync.hexists(app.keys.legacy_entries, "r")
    assert backend.sync.xreadgroup(GROUP, "c9", {app.keys.ready: ">"}, count=10) in ([], None)
    assert app.get_run("r").state == "cancelled"
    assert int(backend.sync.hget(app.keys.stats, "cancelled")) == 1


def test_a_running_run_gets_a_request_naming_its_entry(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["r"])
    res = app.cancel("r")
    assert (res.outcome, bool(res), res.requested) == (CancelOutcome.REQUESTED, False, True)
    assert backend.sync.get(app.keys.cancel_request("r")) == entries["r"].encode()
    assert backend.sync.pttl(app.keys.cancel_request("r")) > 0
    st = app.get_run("r")
    assert (st.state, st.cancel_requested) == ("running", True)
    assert app.cancel("r").outcome is CancelOutcome.REQUESTED  # asking again is harmless


def test_done_and_unknown_runs_are_told_apart(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["d"])
    app.scripts.run(S.ack(app.keys, "c1", [(entries["d"], "d")], now_ms=NOW,
                          dedupe_window_ms=60_000))  # fmt: skip
    assert app.cancel("d").outcome is CancelOutcome.DONE
    assert app.cancel("nobody").outcome is CancelOutcome.NOT_FOUND
    assert not backend.sync.exists(app.keys.cancelled)


def test_discard_ends_only_runs_the_consumer_owns(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["a", "b"], consumer="c1")
    call = C.discard(app.keys, "c2", [(entries["a"], "a")], now_ms=NOW, dedupe_window_ms=60_000)
    assert app.scripts.run(call) == [HoldCode.FENCED]
    assert app.get_run("a").state == "running"
    call = C.discard(app.keys, "c1", [(entries["a"], "a"), (entries["b"], "b")], now_ms=NOW,
                     dedupe_window_ms=60_000)  # fmt: skip
    assert app.scripts.run(call) == [HoldCode.OK, HoldCode.OK]
    assert [app.get_run(r).state for r in "ab"] == ["cancelled", "cancelled"]
    assert backend.sync.xlen(app.keys.ready) == 0
    assert backend.sync.xpending(app.keys.ready, GROUP)["pending"] == 0
    assert app.get_run("a").cancelled_at is not None


def test_cancelled_records_are_trimmed_after_the_window(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"old": NOW + 1, "new": NOW + 2})
    app.scripts.run(C.revoke(app.keys, "old", now_ms=NOW, dedupe_window_ms=1000))
    app.scripts.run(C.revoke(app.keys, "new", now_ms=NOW + 5000, dedupe_window_ms=1000))
    assert backend.sync.zrange(app.keys.cancelled, 0, -1) == [b"new"]


def test_bad_input_and_wrong_types_are_refused_before_writing(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"a": NOW + 1})
    with pytest.raises(Exception, match="run_id is empty"):
        app.scripts.run(C.revoke(app.keys, "", now_ms=NOW, dedupe_window_ms=1))
    backend.sync.set(app.keys.cancelled, "oops")
    with pytest.raises(Exception, match="WRONGTYPE zsched revoke"):
        app.cancel("a")
    assert backend.sync.hexists(app.keys.runs, "a")
    backend.sync.delete(app.keys.cancelled)
    with pytest.raises(Exception, match="not a stream id"):
        app.scripts.run(C.discard(app.keys, "c", [("x", "a")], now_ms=NOW, dedupe_window_ms=1))
