"""replace.lua, enqueue's conflict modes: "replace" gives a waiting run the new payload and due,
"debounce" pushes the due back but never past max_delay after the first enqueue; a run already
dispatched or done is never replaced; each outcome is reported and counted."""

from __future__ import annotations

import pytest
from helpers import NOW, seed_ready
from state import delayed_count, delayed_due, envelope_of

from zsched import EnqueueOutcome, FakeClock
from zsched.observability.metrics import Metrics
from zsched.protocol.envelope import decode
from zsched.runs import controls as C
from zsched.store import scripts as S


def fake_app(backend, queue, **kw):
    return backend.app(queue, clock=FakeClock(NOW), **kw)


def payload_of(backend, app, run_id):
    return decode(envelope_of(backend.sync, app.keys, run_id), run_id).payload


def stats(backend, app) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in backend.sync.hgetall(app.keys.stats).items()}


def test_replace_gives_the_waiting_run_the_new_payload_task_and_due(backend, queue) -> None:
    app = fake_app(backend, queue)
    first = app.enqueue("t", {"v": 1}, run_id="a", delay=60)
    assert (first.outcome, first.duplicate, first.replaced) == (
        EnqueueOutcome.ENQUEUED,
        False,
        False,
    )
    rid = app.enqueue("u", {"v": 2}, run_id="a", delay=10, on_conflict="replace")
    assert (rid, rid.outcome, rid.duplicate, rid.replaced) == (
        "a",
        EnqueueOutcome.REPLACED,
        False,
        True,
    )
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 10_000
    assert delayed_count(backend.sync, app.keys) == 1
    assert payload_of(backend, app, "a") == {"v": 2}
    st = app.get_run("a")
    assert (st.state, st.task) == ("scheduled", "u")
    assert stats(backend, app) == {"enqueued": 1, "replaced": 1}


def test_replace_may_move_the_run_later_too(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="a", delay=10)
    app.enqueue("t", 2, run_id="a", delay=600, on_conflict="replace")
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 600_000


def test_replace_of_an_unknown_id_enqueues_it(backend, queue) -> None:
    app = fake_app(backend, queue)
    rid = app.enqueue("t", 1, run_id="a", delay=5, on_conflict="replace")
    assert (rid.outcome, rid.duplicate) == (EnqueueOutcome.ENQUEUED, False)
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 5_000


@pytest.mark.parametrize("mode", ["replace", "debounce"])
def test_a_run_on_the_stream_or_done_is_never_replaced(backend, queue, mode) -> None:
    app, entries = seed_ready(backend, queue, ["running", "done"])
    app.scripts.run(S.ack(app.keys, "c1", [(entries["done"], "done")], now_ms=NOW,
                          dedupe_window_ms=60_000))  # fmt: skip
    before = backend.sync.dump(app.keys.runs), backend.sync.dump(app.keys.ready)
    kw = {"max_delay": 60} if mode == "debounce" else {}
    a = app.enqueue("t", 9, run_id="running", delay=5, on_conflict=mode, **kw)
    b = app.enqueue("t", 9, run_id="done", delay=5, on_conflict=mode, **kw)
    assert (a.outcome, a.duplicate, a.replaced) == (EnqueueOutcome.DUPLICATE, True, False)
    assert (b.outcome, b.duplicate) == (EnqueueOutcome.DUPLICATE_DONE, True)
    assert (backend.sync.dump(app.keys.runs), backend.sync.dump(app.keys.ready)) == before
    assert stats(backend, app)["duplicate"] == 2


def test_keep_reports_a_done_duplicate_apart_from_a_live_one(backend, queue) -> None:
    app, entries = seed_ready(backend, queue, ["done"])
    app.scripts.run(S.ack(app.keys, "c1", [(entries["done"], "done")], now_ms=NOW,
                          dedupe_window_ms=60_000))  # fmt: skip
    app.enqueue("t", None, run_id="live", delay=60)
    assert app.enqueue("t", None, run_id="done").outcome is EnqueueOutcome.DUPLICATE_DONE
    live = app.enqueue("t", None, run_id="live")
    assert (live.outcome, live.replaced) == (EnqueueOutcome.DUPLICATE, False)


def test_debounce_pushes_the_due_back_but_never_past_max_delay_after_the_first(backend, queue):
    app = fake_app(backend, queue)
    clock = app.clock
    first = app.enqueue("save", {"draft": 1}, run_id="d", delay=10, on_conflict="debounce",
                        max_delay=30)  # fmt: skip
    assert first.outcome is EnqueueOutcome.ENQUEUED
    assert delayed_due(backend.sync, app.keys, "d") == NOW + 10_000
    dues = []
    for i, at in enumerate((5_000, 12_000, 19_000, 26_000), start=2):
        clock.set(NOW + at)
        rid = app.enqueue("save", {"draft": i}, run_id="d", delay=10, on_conflict="debounce",
                          max_delay=30)  # fmt: skip
        assert (rid.outcome, rid.replaced, rid.duplicate) == (EnqueueOutcome.DEBOUNCED, True, False)
        dues.append(delayed_due(backend.sync, app.keys, "d") - NOW)
    assert dues == [15_000, 22_000, 29_000, 30_000]  # the last one capped at first + 30 s
    assert payload_of(backend, app, "d") == {"draft": 5}
    assert stats(backend, app) == {"enqueued": 1, "debounced": 4}


def test_a_new_debounce_series_starts_after_the_run_left(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="d", delay=10, on_conflict="debounce", max_delay=30)
    assert app.cancel("d")
    app.clock.set(NOW + 100_000)
    app.enqueue("t", 2, run_id="d", delay=10, on_conflict="debounce", max_delay=30)
    app.clock.set(NOW + 125_000)
    app.enqueue("t", 3, run_id="d", delay=10, on_conflict="debounce", max_delay=30)
    # The deadline is the second series' first enqueue + 30 s, not the cancelled one's.
    assert delayed_due(backend.sync, app.keys, "d") == NOW + 130_000


def test_debounce_of_a_run_enqueued_with_keep_starts_its_window_then(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="d", delay=3600)
    app.enqueue("t", 2, run_id="d", delay=3600, on_conflict="debounce", max_delay=60)
    assert delayed_due(backend.sync, app.keys, "d") == NOW + 60_000


def test_old_debounce_deadlines_are_dropped_as_later_calls_pass(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="gone", delay=1, on_conflict="debounce", max_delay=2)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW + 5_000, limit=10, max_backlog=0))
    assert backend.sync.zscore(app.keys.debounce, "gone") is not None
    app.clock.set(NOW + app.settings.dedupe_window_ms + 10_000)
    app.enqueue("t", 1, run_id="other", delay=1, on_conflict="debounce", max_delay=2)
    assert backend.sync.zrange(app.keys.debounce, 0, -1) == [b"other"]


def test_an_earlier_replacement_at_the_head_wakes_dispatchers(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="a", delay=60)
    app.enqueue("t", 1, run_id="b", delay=120)
    ps = backend.sync.pubsub()
    ps.subscribe(app.keys.wake)
    assert ps.get_message(timeout=5)["type"] == "subscribe"
    app.enqueue("t", 2, run_id="b", delay=300, on_conflict="replace")  # later: silent
    app.enqueue("t", 2, run_id="b", delay=30, on_conflict="replace")  # the new head
    m = ps.get_message(timeout=5)
    assert m["data"] == str(NOW + 30_000).encode()
    ps.close()


def test_outcomes_are_counted_in_the_metrics(backend, queue) -> None:
    metrics = Metrics()
    app = fake_app(backend, queue, metrics=metrics)
    app.enqueue("t", 1, run_id="a", delay=60, on_conflict="replace")
    app.enqueue("t", 1, run_id="a", delay=60, on_conflict="replace")
    app.enqueue("t", 1, run_id="a", delay=60, on_conflict="debounce", max_delay=90)
    get = metrics.registry.get_sample_value
    assert get("zsched_runs_enqueued_total", {"queue": queue}) == 1
    assert get("zsched_runs_replaced_total", {"queue": queue, "outcome": "replaced"}) == 1
    assert get("zsched_runs_replaced_total", {"queue": queue, "outcome": "debounced"}) == 1


def test_bad_modes_are_refused_before_redis(backend, queue) -> None:
    app = fake_app(backend, queue)
    with pytest.raises(ValueError, match="on_conflict must be one of keep, replace, debounce"):
        app.enqueue("t", 1, run_id="a", on_conflict="merge")
    with pytest.raises(ValueError, match="needs max_delay"):
        app.enqueue("t", 1, run_id="a", on_conflict="debounce")
    with pytest.raises(ValueError, match="needs max_delay"):
        app.enqueue("t", 1, run_id="a", on_conflict="replace", max_delay=5)
    with pytest.raises(ValueError, match="only for on_conflict='debounce'"):
        app.enqueue("t", 1, run_id="a", max_delay=5)
    with pytest.raises(ValueError, match="delay must be finite"):
        app.enqueue("t", 1, run_id="a", on_conflict="debounce", max_delay=-1)
    assert not backend.sync.exists(app.keys.runs)


@pytest.mark.parametrize(("index", "value", "message"), [
    (4, "5", "run_at_ms must be a whole number"), (7, "x", "max_delay_ms must be a whole number"),
    (6, "", "envelope is empty"), (5, "", "task is empty"), (3, "", "run_id is empty"),
    (3, "\xff", "not valid UTF-8"),
])  # fmt: skip
def test_the_script_refuses_bad_arguments_and_writes_nothing(backend, queue, index, value, message):
    app = fake_app(backend, queue)
    call = C.replace(app.keys, ("a", NOW, "t", b"env"), now_ms=NOW, dedupe_window_ms=1,
                     max_envelope_bytes=100, max_delay_ms=5)  # fmt: skip
    args = list(call.args)
    args[index] = value.encode("latin-1") if value == "\xff" else ("-5" if index == 4 else value)
    with pytest.raises(Exception, match=message):
        app.scripts.run(C.Call(call.name, call.keys, args, call.decode))
    assert not backend.sync.exists(*app.keys.all_fixed())


def test_enqueue_many_takes_a_conflict_mode_per_item(backend, queue) -> None:
    app = fake_app(backend, queue)
    app.enqueue("t", 1, run_id="a", delay=60)
    app.enqueue("t", 1, run_id="b", delay=60)
    out = app.enqueue_many([
        {"task": "t", "payload": 2, "run_id": "a", "delay": 5, "on_conflict": "replace"},
        {"task": "t", "payload": 2, "run_id": "b", "delay": 5},
        ("t", 3),
        {"task": "t", "payload": 4, "run_id": "c", "delay": 9, "on_conflict": "debounce",
         "max_delay": 30},
    ])  # fmt: skip
    assert [r.outcome for r in out] == [EnqueueOutcome.REPLACED, EnqueueOutcome.DUPLICATE,
                                        EnqueueOutcome.ENQUEUED, EnqueueOutcome.ENQUEUED]  # fmt: skip
    assert out[0] == "a" and out[1] == "b" and out[3] == "c"
    assert delayed_due(backend.sync, app.keys, "a") == NOW + 5_000
    assert delayed_due(backend.sync, app.keys, "b") == NOW + 60_000
    assert payload_of(backend, app, "a") == 2 and payload_of(backend, app, "b") == 1
    with pytest.raises(ValueError, match="on_conflict must be one of"):
        app.enqueue_many([{"task": "t", "run_id": "x", "on_conflict": "nope"}])
