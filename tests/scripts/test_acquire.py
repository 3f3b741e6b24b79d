"""acquire.lua: a task's concurrency semaphore and token bucket, shared through Redis."""

from __future__ import annotations

import pytest

import zsched
from zsched.worker import limits as L

NOW = 1_800_000_000_000


def take(app, entry, limits, now=NOW, renew=False, key=None, run=None):
    call = L.acquire(app.keys, "t", key, entry, run or f"run-{entry}", limits, hold_ms=1000,
                     now_ms=now, renew=renew)  # fmt: skip
    return app.scripts.run(call)


def test_the_semaphore_admits_n_and_defers_the_rest(backend, queue) -> None:
    app = backend.app(queue)
    two = L.Limits(max_concurrency=2)
    assert take(app, "1-1", two).granted and take(app, "1-2", two).granted
    denied = take(app, "1-3", two)
    assert (denied.granted, denied.wait_ms, denied.waiting) == (False, L.DEFER_MS, 1)
    assert take(app, "1-1", two, renew=True).granted  # a holder is granted again (renewal)
    backend.sync.zrem(app.keys.limit_holders("t"), "1-1")  # its handler ended
    got = take(app, "1-3", two)
    assert (got.granted, got.waiting) == (True, 0)
    assert backend.sync.zcard(app.keys.limit_holders("t")) == 2


def test_a_crashed_holders_share_ends_with_its_hold_and_a_reclaim_reuses_it(backend, queue):
    app = backend.app(queue)
    one = L.Limits(max_concurrency=1)
    assert take(app, "1-1", one).granted
    assert not take(app, "1-2", one, now=NOW + 999).granted
    assert take(app, "1-1", one, now=NOW + 500).granted  # reclaimed: same entry, same share
    assert take(app, "1-2", one, now=NOW + 1501).granted  # the hold ran out: the share is free
    assert backend.sync.zrange(app.keys.limit_holders("t"), 0, -1) == [b"1-2"]


def test_the_bucket_allows_a_burst_then_one_token_per_interval(backend, queue) -> None:
    app = backend.app(queue)
    rated = L.Limits(rate_per_s=10.0, burst=2)
    assert [take(app, f"1-{i}", rated).granted for i in range(2)] == [True, True]
    denied = take(app, "1-9", rated)
    assert (denied.granted, denied.wait_ms) == (False, 100)
    assert not take(app, "1-9", rated, now=NOW + 50).granted
    assert take(app, "1-9", rated, now=NOW + 100).granted
    assert not take(app, "1-10", rated, now=NOW + 100).granted
    assert take(app, "1-11", rated, now=NOW + 10_000).granted  # refilled, never past burst
    assert take(app, "1-12", rated, now=NOW + 10_000).granted
    assert not take(app, "1-13", rated, now=NOW + 10_000).granted


def test_both_limits_take_both_or_neither(backend, queue) -> None:
    app = backend.app(queue)
    both = L.Limits(max_concurrency=5, rate_per_s=1.0, burst=1)
    assert take(app, "1-1", both).granted
    assert not take(app, "1-2", both).granted  # no token: no place taken in the semaphore
    assert backend.sync.zrange(app.keys.limit_holders("t"), 0, -1) == [b"1-1"]


def test_each_limit_key_has_its_own_limit(backend, queue) -> None:
    app = backend.app(queue)
    one = L.Limits(max_concurrency=1)
    assert take(app, "1-1", one, key="tenant-a").granted
    assert take(app, "1-2", one, key="tenant-b").granted
    assert not take(app, "1-3", one, key="tenant-a").granted


def test_bad_arguments_are_refused(backend, queue) -> None:
    app = backend.app(queue)
    call = L.acquire(app.keys, "t", None, "1-1", "r", L.Limits(1), hold_ms=0, now_ms=NOW)
    with pytest.raises(Exception, match="hold_ms >= 1"):
        app.scripts.run(call)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"max_concurrency": 0}, "max_concurrency must be a whole number"),
    ({"rate": "fast"}, "rate 'fast' must be like"),
    ({"rate": "0/s"}, "must be above 0"),
    ({"burst": 3}, "burst and limit_key need"),
    ({"rate": "1/s", "burst": 0}, "burst must be a whole number"),
    ({"max_concurrency": 1, "limit_key": "tenant"}, "limit_key must be a function"),
])  # fmt: skip
def test_bad_limit_options_are_refused_when_the_task_is_registered(kw, needle) -> None:
    app = zsched.App("redis://127.0.0.1:1/0", queue="q")
    with pytest.raises(zsched.ZschedError, match=needle):
        app.task(name="t", **kw)(lambda p: None)


def test_rates_parse_in_their_units() -> None:
    assert [L.parse_rate(r) for r in ("10/s", "600/m", "5/10s", "36/h", 2.5)] == \
        [10.0, 10.0, 0.5, 0.01, 2.5]  # fmt: skip


def test_get_run_tells_a_deferred_run_waits_for_its_tasks_limit(backend, queue) -> None:
    app = backend.app(queue)
    app.enqueue("t", None, run_id="r", delay=60)
    assert app.get_run("r").waiting_for_limit is None
    one = L.Limits(max_concurrency=1)
    assert take(app, "1-1", one, run="other").granted
    assert not take(app, "1-2", one, run="r").granted
    st = app.get_run("r")
    assert (st.state, st.waiting_for_limit) == ("scheduled", "t")


def test_a_queue_of_rated_runs_reserves_tokens_in_order_and_is_deferred_once(backend, queue):
    app = backend.app(queue)
    rated = L.Limits(rate_per_s=10.0, burst=1)
    got = [take(app, f"1-{i}", rated) for i in range(5)]
    assert [g.granted for g in got] == [True, False, False, False, False]
    assert [g.wait_ms for g in got[1:]] == [100, 200, 300, 400]  # each its own next token
    for i, g in enumerate(got[1:], start=1):  # each back at its time: started, no new wait
        assert take(app, f"1-{i}", rated, now=NOW + g.wait_ms).granted
    assert not take(app, "1-9", rated, now=NOW + 400).granted  # the next token is after those


def test_many_runs_waiting_for_few_slots_poll_less_often(backend, queue) -> None:
    app = backend.app(queue)
    one = L.Limits(max_concurrency=1)
    assert take(app, "1-0", one).granted
    waits = [take(app, f"1-{i}", one).wait_ms for i in range(1, 6)]
    assert waits == [L.DEFER_MS * n for n in range(1, 6)]
    many = [take(app, f"2-{i}", one).wait_ms for i in range(300)]
    assert max(many) == L.MAX_DEFER_MS
