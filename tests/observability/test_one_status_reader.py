"""App.status() and the collector read a queue's counts with one reader (zsched/store/counts.py):
the same state gives the same counts, and a scrape stays one pipeline per partition."""

from __future__ import annotations

from typing import Any

import redis
from prometheus_client import CollectorRegistry

import zsched
from tests.state import add_delayed
from zsched.observability.collector import QueueCollector
from zsched.protocol.keys import GROUP, QueueKeys


def _state(r: redis.Redis, k: QueueKeys) -> None:
    """Due and not-yet-due runs, a stream with pending and undelivered entries, dead letters."""
    now_ms = int(r.time()[0]) * 1000
    add_delayed(r, k, {"due-1": now_ms - 60_000, "due-2": now_ms - 1, "later": now_ms + 3_600_000})
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    for i in range(5):
        r.xadd(k.ready, {"run_id": f"run-{i}", "envelope": b"x"})
    r.xreadgroup(GROUP, "worker-a", {k.ready: ">"}, count=2)
    r.xadd(k.dead, {"run_id": "dead-1", "envelope": b"x", "reason": "r"})


def test_app_status_and_the_collector_report_the_same_counts(real: Any, queue: str) -> None:
    r = real.sync
    app = zsched.App(r, queue=queue)
    _state(r, QueueKeys(queue))
    app.pause_queue("maintenance")
    st = app.status()
    reg = CollectorRegistry()
    QueueCollector(r, [queue], registry=reg)

    def gauge(name: str) -> float | None:
        return reg.get_sample_value(name, {"queue": queue})

    assert (st.delayed, st.due, st.stream_length, st.pending, st.dead, st.paused) == (
        3, 2, 5, 2, 1, True
    )  # fmt: skip
    assert gauge("zsched_delayed_runs") == st.delayed
    assert gauge("zsched_due_backlog_runs") == st.due
    assert gauge("zsched_stream_length") == st.stream_length
    assert gauge("zsched_pending_runs") == st.pending
    assert gauge("zsched_consumer_group_lag") == 3
    assert gauge("zsched_dead_letters") == st.dead
    assert gauge("zsched_queue_paused") == 1.0
    age = gauge("zsched_due_backlog_oldest_age_seconds")
    assert age is not None and age >= 60.0 and st.oldest_due_age_ms >= 60_000


def test_a_scrape_reads_each_queue_in_one_pipeline(real: Any, queue: str) -> None:
    r = real.sync
    _state(r, QueueKeys(queue))
    executes: list[int] = []
    original = r.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        pipe = original(*args, **kwargs)
        run = pipe.execute

        def execute(*a: Any, **kw: Any) -> Any:
            executes.append(len(pipe.command_stack))
            return run(*a, **kw)

        pipe.execute = execute
        return pipe

    r.pipeline = counting
    try:
        reg = CollectorRegistry()
        QueueCollector(r, [queue], registry=reg)
        up = reg.get_sample_value("zsched_collector_up", {"queue": queue})  # scrapes
    finally:
        del r.pipeline
    assert up == 1
    assert len(executes) == 1  # status.lua, the shared counts and the rules: one round trip
