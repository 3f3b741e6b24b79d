"""The dispatcher's batching: calls sized on Redis's own time, two calls in flight.

On redis-server and fakeredis. What could go wrong: a run moved twice or not at all when two
calls overlap, the tick cap exceeded, the head reported from a stale reply, or calls shrunk
by delays of the dispatcher process itself (which once sized them to the floor on a slow host).
"""

from __future__ import annotations

import time

from redis_server import server_kind

from tests.state import delayed_count
from zsched import FakeClock
from zsched.dispatch import dispatcher as D
from zsched.store import scripts as S

NOW = 1_800_000_000_000


def _seed(app, n: int, later: int | None = None) -> None:
    app.enqueue_many({"task": "t", "run_id": f"r{i:05d}", "run_at": (NOW - 1000) / 1000}
                     for i in range(n))  # fmt: skip
    if later is not None:
        app.enqueue("t", run_id="later", run_at=later / 1000)


async def test_one_tick_moves_every_due_run_once_with_two_calls_in_flight(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    _seed(app, 2_000, later=NOW + 60_000)
    d = app.dispatcher(redis=backend.async_client(), batch_size=100, max_batches_per_tick=1000)
    t = await d.tick()
    assert (t.moved, t.more, t.next_due_ms) == (2_000, False, NOW + 60_000)
    entries = backend.sync.xrange(app.keys.ready)
    ids = [f[b"run_id"].decode() for _, f in entries]
    assert len(ids) == 2_000 and len(set(ids)) == 2_000
    # Runs due at the same instant leave in id order: the order they were enqueued.
    assert ids == sorted(ids)
    assert delayed_count(backend.sync, app.keys) == 1
    assert int(backend.sync.hget(app.keys.stats, "dispatched")) == 2_000
    await d.close()


async def test_the_tick_cap_bounds_calls_in_flight_too(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    _seed(app, 1_000)
    d = app.dispatcher(redis=backend.async_client(), batch_size=100, max_batches_per_tick=3)
    calls = _count_calls(d)
    t = await d.tick()
    # Three calls, whatever size each was given (a slow backend makes them smaller).
    assert calls == [3] and t.more
    assert t.moved == backend.sync.xlen(app.keys.ready) > 0
    t = await d.tick()
    assert calls == [6] and t.more
    await d.close()


def _count_calls(d, busy_us: int | None = None) -> list[int]:
    """Count the dispatcher's script calls; optionally report `busy_us` as their Redis time."""
    calls = [0]
    sized = d._sized

    async def counted(c):
        calls[0] += 1
        r, limit, sent_at = await sized(c)
        if busy_us is not None:
            r = S.DispatchResult(
                r.moved, r.next_due_ms, r.now_ms, r.backlogged, r.run_at_ms, busy_us
            )
        return r, limit, sent_at

    d._sized = counted
    return calls


async def test_the_script_reports_its_own_time_only_when_it_moved_runs(backend, queue) -> None:
    app = backend.app(queue)
    k = app.keys
    idle = app.scripts.run(S.dispatch(k, now_ms=None, limit=100, max_backlog=0))
    assert (idle.moved, idle.busy_us) == (0, 0)
    due = int(time.time() * 1000) - 1000
    app.enqueue_many({"task": "t", "run_at": due / 1000} for _ in range(50))
    r = app.scripts.run(S.dispatch(k, now_ms=None, limit=100, max_backlog=0))
    assert r.moved == 50 and len(r.run_at_ms) == 50 and set(r.run_at_ms) == {due}
    if backend.name == "redis" and server_kind()[0] == "valkey":
        # Valkey freezes TIME for the length of a script, so a script cannot time itself
        # there: busy_us is 0 and the dispatcher sizes its calls at batch_size (README,
        # "Supported servers"; tests/pyuser/test_valkey.py).
        assert r.busy_us == 0
        return
    assert 0 < r.busy_us < 10_000_000
    # With a fixed now_ms (tests, the simulator) the script still times itself.
    app.enqueue_many({"task": "t", "run_at": due / 1000} for _ in range(5))
    r = app.scripts.run(S.dispatch(k, now_ms=due, limit=100, max_backlog=0))
    assert r.moved == 5 and r.busy_us > 0


async def test_calls_are_sized_on_redis_time_not_on_the_dispatchers_own_delays(
    backend, queue, monkeypatch
) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    _seed(app, 3_000)
    d = app.dispatcher(redis=backend.async_client(), batch_size=200, max_batches_per_tick=1000)
    # Redis reports each call ran 0.1 ms; this process is what is slow.
    _count_calls(d, busy_us=100)
    slow_observe = d._observe

    def observe(r):  # a dispatcher process that is slow to record the lag (a loaded host)
        time.sleep(0.005)
        slow_observe(r)

    monkeypatch.setattr(d, "_observe", observe)
    assert (await d.tick()).moved == 3_000
    assert d._limit == 200  # the calls ran well under CALL_TARGET_S in Redis: they stay full
    # A call that ran long in Redis shrinks the next one, in proportion.
    d._adapt(200, 4 * D.CALL_TARGET_S)
    assert d._limit == 50
    d._adapt(50, D.CALL_TARGET_S / 4)
    assert d._limit == 100
    await d.close()


async def test_the_sleep_to_the_next_due_run_counts_from_when_the_call_went_out(
    backend, queue
) -> None:
    app = backend.app(queue)  # the system clock
    d = app.dispatcher(redis=backend.async_client())
    now = 1_800_000_000_000
    # Redis read its clock after the call was sent 30 ms ago; the next run is due 100 ms
    # after that reading: 70 ms are left, not 100.
    t = D.TickResult(0, now + 100, now, False, False, time.monotonic() - 0.030)
    assert 0.060 < d._sleep_s(t) <= 0.070
    late = D.TickResult(0, now + 100, now, False, False, time.monotonic() - 0.5)
    assert d._sleep_s(late) == 0.0
    # A fake clock has no wall time to subtract (tests, the simulator).
    fake = backend.app(queue, clock=FakeClock(now)).dispatcher(redis=backend.async_client())
    assert fake._sleep_s(t) == 0.1
    await d.close()
    await fake.close()


def test_a_tick_result_still_answers_held_as_an_alias_of_backlogged() -> None:
    # "held" also meant a worker's hold; the field is `backlogged` now, the old name reads it.
    assert D.TickResult(0, None, 0, True, False).held is True
    assert D.TickResult(0, None, 0, False, False).held is False


async def test_the_first_call_is_small_and_calls_grow_while_redis_runs_them_fast(backend, queue):
    """The first dispatch call of a burst is the slowest (a fresh `entries` hash): it moves at
    most 50 runs, and the size doubles while calls run under CALL_TARGET_S in Redis."""
    app = backend.app(queue, clock=FakeClock(NOW))
    _seed(app, 1_000)
    d = app.dispatcher(redis=backend.async_client(), batch_size=400, max_batches_per_tick=1000)
    limits: list[int] = []
    sized = d._sized

    async def recorded(c):
        limits.append(int(c.args[1]))
        r, limit, sent_at = await sized(c)
        return (
            S.DispatchResult(r.moved, r.next_due_ms, r.now_ms, r.backlogged, r.run_at_ms, 100),
            limit,
            sent_at,
        )

    d._sized = recorded
    assert (await d.tick()).moved == 1_000
    assert limits[0] == 50 and max(limits) == 400 and limits == sorted(limits)
    # A long-running dispatcher: a pass that moved nothing sizes the next burst's first call
    # as a fresh dispatcher's, not at the size the last burst grew to.
    assert (await d.tick()).moved == 0 and d._limit == 50
    app.enqueue_many({"task": "t", "run_id": f"s{i:05d}", "run_at": (NOW - 1000) / 1000}
                     for i in range(1_000))  # fmt: skip
    limits.clear()
    assert (await d.tick()).moved == 1_000
    assert limits[0] == 50 and max(limits) == 400
    await d.close()


async def test_a_call_between_half_and_three_quarters_of_the_target_grows_the_next(backend, queue):
    """A size that started small grows towards the size that takes 3/4 of CALL_TARGET_S (at
    most doubling), so it settles where a shrinking size would, not where it stopped doubling."""
    app = backend.app(queue, clock=FakeClock(NOW))
    d = app.dispatcher(redis=backend.async_client(), batch_size=500)
    d._adapt(100, 0.6 * D.CALL_TARGET_S)
    assert d._limit == 125
    d._adapt(125, 0.9 * D.CALL_TARGET_S)
    assert d._limit == 125  # between 3/4 and the whole target: it stays
    d._adapt(400, 0.1 * D.CALL_TARGET_S)
    assert d._limit == 500  # never over batch_size
    d._adapt(60, 0.0)  # Valkey: TIME frozen in a script, the call reports 0
    assert d._limit == 120
    await d.close()
