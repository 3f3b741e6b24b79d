"""Found by a review of the worker side (scripts and Python): each test failed before its fix.

A batch with a bad item later in it used to stop the script after the earlier items' writes
(retry, release and replay then lost those runs; dead skipped its counter): every item is now
checked before the first write, and an error reply means nothing was written."""

from __future__ import annotations

import pytest
import redis
from helpers import NOW, env, seed_ready
from state import delayed_count, places, snapshot

from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S


def _dead_letter(backend, app, ent, run_id):
    """Dead-letter `run_id` through dead.lua; returns its dead-letter entry id."""
    assert app.scripts.run(S.dead(app.keys, "c1", [(ent[run_id], run_id, "boom", env(run_id))],
                                  now_ms=NOW)) == [HoldCode.OK]  # fmt: skip
    rows = backend.sync.xrange(app.keys.dead)
    return next(e.decode() for e, f in rows if f[b"run_id"] == run_id.encode())


# -- an error reply part-way through a batch must not have written the earlier items ---------


def test_release_with_a_malformed_entry_id_later_in_the_batch_loses_no_run(backend, queue):
    app, ent = seed_ready(backend, queue, ["a"])
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(redis.ResponseError, match="entry id bogus is not a stream id"):
        app.scripts.run(S.release(app.keys, "c1", [(ent["a"], "a"), ("bogus", "b")], now_ms=NOW))
    assert snapshot(backend.sync, app.keys) == before
    assert places(backend.sync, app.keys, "a") == ["ready"]


def test_retry_with_a_malformed_entry_id_later_in_the_batch_loses_no_run(backend, queue):
    app, ent = seed_ready(backend, queue, ["a"])
    groups = [(ent["a"], "a", 0, env("a", attempt=2)), ("bogus", "b", 0, env("b", attempt=2))]
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(redis.ResponseError, match="entry id bogus is not a stream id"):
        app.scripts.run(S.retry(app.keys, "c1", groups, now_ms=NOW))
    assert snapshot(backend.sync, app.keys) == before


def test_replay_with_an_empty_run_id_later_in_the_batch_loses_no_run(backend, queue):
    app, ent = seed_ready(backend, queue, ["a", "b"])
    da = _dead_letter(backend, app, ent, "a")
    db = _dead_letter(backend, app, ent, "b")
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(redis.ResponseError, match="has no run id or envelope"):
        app.scripts.run(S.replay(app.keys, [(da, "a", env("a")), (db, "", env("b"))], now_ms=NOW))
    assert snapshot(backend.sync, app.keys) == before


def test_replay_with_a_malformed_dead_entry_id_later_in_the_batch_loses_no_run(backend, queue):
    app, ent = seed_ready(backend, queue, ["a"])
    da = _dead_letter(backend, app, ent, "a")
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(redis.ResponseError, match="replay: entry id bogus is not a stream id"):
        app.scripts.run(S.replay(app.keys, [(da, "a", env("a")), ("bogus", "b", env("b"))],
                                 now_ms=NOW))  # fmt: skip
    assert snapshot(backend.sync, app.keys) == before


def test_dead_with_a_malformed_entry_id_later_in_the_batch_keeps_stats_consistent(backend, queue):
    app, ent = seed_ready(backend, queue, ["a"])
    groups = [(ent["a"], "a", "boom", env("a")), ("bogus", "b", "boom", env("b"))]
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(redis.ResponseError, match="entry id bogus is not a stream id"):
        app.scripts.run(S.dead(app.keys, "c1", groups, now_ms=NOW))
    assert snapshot(backend.sync, app.keys) == before


# -- the worker (Python) ---------------------------------------------------------------------


async def test_an_envelope_whose_times_are_past_year_9999_is_dead_lettered_with_a_reason(
    backend, queue
):
    """A foreign client's envelope (enqueue.lua checks run_at_ms in ARGV, not in the envelope)
    with a time past the year 9999 (datetime cannot hold it: the worker raised before writing
    an outcome): never run, dead-lettered naming the field."""
    import msgpack

    app = backend.app(queue)
    ran = []
    app.task(name="t")(ran.append)
    w = app.worker(redis=backend.async_client())
    await w.setup()
    raw = msgpack.packb([2, "t", None, 10**15])  # year 33658
    backend.sync.xadd(app.keys.ready, {"run_id": "huge", "envelope": raw, "due_ms": NOW})
    await w.tick()
    st = snapshot(backend.sync, app.keys)
    await w.close()
    assert ran == []
    assert st["pending"] == [], "entry left pending: no outcome was written"
    assert [d["run_id"] for d in st["dead"]] == ["huge"]
    (letter,) = app.dead_letters()
    assert "envelope field 'run_at_ms' is after the year 9999" in letter.reason


async def test_a_flush_that_fails_part_way_does_not_resend_outcomes_already_written(backend, queue):
    """ack.lua lands, then retry.lua fails (connection lost): the landed acks must not be sent
    again (they come back fenced, counting fences and duplicates that never happened)."""
    import redis.exceptions

    app = backend.app(queue)
    app.task(name="ok")(lambda p: None)

    @app.task(name="bad", max_attempts=5)
    def bad(p):
        raise ValueError("again")

    app.enqueue("ok", None, run_id="a")
    app.enqueue("bad", None, run_id="b")
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    await d.tick()
    real_run, failed = w.scripts.run, []

    async def flaky(call):
        if call.name == "retry" and not failed:
            failed.append(call)
            raise redis.exceptions.ConnectionError("lost")
        return await real_run(call)

    w.scripts.run = flaky
    with pytest.raises(redis.exceptions.ConnectionError):
        await w.tick()
    await w.flush()
    st = snapshot(backend.sync, app.keys)
    await d.close()
    await w.close()
    assert st["stats"].get("acked") == 1 and st["stats"].get("retried") == 1
    assert st["stats"].get("fenced", 0) == 0, st["stats"]


def test_replay_dead_with_a_generator_of_ids_counts_no_negative_missing(backend, queue):
    """The ids were read twice: a generator was empty the second time (missing -1)."""
    app, ent = seed_ready(backend, queue, ["a"])
    da = _dead_letter(backend, app, ent, "a")
    counts = app.replay_dead(x for x in [da])
    assert counts == {"replayed": 1, "missing": 0, "live": 0, "undecodable": 0}
    assert delayed_count(backend.sync, app.keys) == 1


@pytest.mark.parametrize("bad", ["bogus", "1-", "-1", "1-2-3", " 1-0", "1e3-0", "1" * 20 + "-0"])
def test_every_worker_script_refuses_a_malformed_entry_id_before_writing(backend, queue, bad):
    app, ent = seed_ready(backend, queue, ["a"])
    k = app.keys
    before = snapshot(backend.sync, k)
    calls = [
        S.renew(k, "c1", [ent["a"], bad]),
        S.release(k, "c1", [(ent["a"], "a"), (bad, "b")], now_ms=NOW),
        S.retry(k, "c1", [(ent["a"], "a", 0, env("a")), (bad, "b", 0, env("b"))], now_ms=NOW),
        S.dead(k, "c1", [(ent["a"], "a", "r", env("a")), (bad, "b", "r", env("b"))], now_ms=NOW),
        S.replay(k, [(ent["a"], "a", env("a")), (bad, "b", env("b"))], now_ms=NOW),
    ]
    for call in calls:
        with pytest.raises(
            redis.ResponseError, match=f"{call.name}: entry id .* is not a stream id"
        ):
            app.scripts.run(call)
    assert snapshot(backend.sync, k) == before
    # Well-formed ids of any size Redis takes are not refused.
    assert app.scripts.run(S.renew(k, "c1", [ent["a"], "0", "0-0", "9" * 19 + "-" + "9" * 19])) == [
        1,
        0,
        0,
        0,
    ]
