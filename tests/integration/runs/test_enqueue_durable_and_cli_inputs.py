"""Found by a review of enqueue, partitions, durable writes and the CLI. The tests of a refused
WAIT, the secrets in argparse's and in the URL's query string, an unreachable cluster and a
lookup with the wrong partition count failed before their fixes; the rest pin cases that
were fine."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis.exceptions

import zsched
from zsched.clock import FakeClock
from zsched.errors import NotReplicated
from zsched.observability.metrics import Metrics


def test_enqueue_many_same_run_id_twice_first_wins(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(1_000_000))
    ids = app.enqueue_many(
        [
            {"task": "t", "payload": 1, "run_at": 2000, "run_id": "x"},
            {"task": "t", "payload": 2, "run_at": 1500, "run_id": "x"},
        ]
    )
    assert [i.duplicate for i in ids] == [False, True]
    assert app.get_run("x").run_at.timestamp() == 2000


def test_enqueue_many_generator_mixed_run_at_and_delay(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(1_000_000), partitions=3)
    gen = (
        {"task": "t", **({"delay": i} if i % 2 else {"run_at": 5000 + i}), "run_id": f"r{i}"}
        for i in range(7)
    )
    ids = app.enqueue_many(gen)
    assert [str(i) for i in ids] == [f"r{i}" for i in range(7)]
    assert not any(i.duplicate for i in ids)
    for i in range(7):
        assert app.get_run(f"r{i}").state == "scheduled"
    assert app.enqueue_many(iter([])) == []
    assert app.status().delayed == 7


def test_partitioned_get_run_and_cancel_route_like_enqueue(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(1_000_000), partitions=4)
    rids = ["a", "b@1", "@c", "d@", "sched@1700000000000", "é@x"]
    app.enqueue_many([{"task": "t", "delay": 60, "run_id": r} for r in rids])
    view = app.partition_view(2)
    view.enqueue("t", delay=60, run_id="via-view")
    for r in [*rids, "via-view"]:
        assert app.get_run(r).state == "scheduled"
        assert view.get_run(r).state == "scheduled"
    for r in [*rids, "via-view"]:
        assert app.cancel(r)


#: No replica ever comes here: give up on NotReplicated quickly (it is retried up to the bound).
QUICK = zsched.QueueSettings(outage_retry_ms=200)


def test_durable_refused_wait_is_not_success(real, queue) -> None:
    # A user allowed everything but WAIT: the write cannot be confirmed on a replica.
    r = real.sync
    with pytest.raises(NotReplicated):  # no replica: the baseline refuses
        real.app(queue, durable=True, settings=QUICK).enqueue("t", run_id="d0")
    r.execute_command("ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait")
    try:
        host, port = (
            r.connection_pool.connection_kwargs["host"],
            r.connection_pool.connection_kwargs["port"],
        )
        app = zsched.App(
            f"redis://nowait:pw@{host}:{port}/0",
            queue=queue,
            durable=True,
            metrics=Metrics(),
            settings=QUICK,
        )
        with pytest.raises((NotReplicated, redis.exceptions.ResponseError)):
            app.enqueue("t", run_id="d1")  # WAIT refused (NOPERM): not confirmed
        app.close()
    finally:
        r.execute_command("ACL", "DELUSER", "nowait")


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zsched", *argv],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_unknown_flag_does_not_echo_the_password() -> None:
    p = _cli("status", "--url", "redis://:s3cret@127.0.0.1:1/0")
    assert p.returncode == 2
    assert "s3cret" not in p.stderr + p.stdout


def test_query_string_secret_not_in_error() -> None:
    p = _cli(
        "status",
        "--redis",
        "redis+sentinel://127.0.0.1:1/mymaster?sentinel_password=s3cret&bogus=1",
    )
    assert p.returncode in (1, 2)
    assert "bogus" in p.stderr
    assert "s3cret" not in p.stderr + p.stdout


def test_unreachable_cluster_is_one_line_not_a_traceback() -> None:
    p = _cli("status", "--redis", "redis+cluster://:s3cret@127.0.0.1:1")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert p.stderr.startswith("zsched: error: cannot reach Redis")
    assert "s3cret" not in p.stderr + p.stdout


async def test_held_dispatch_resumes_once_the_stream_shrinks(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(1_000_000))
    app.enqueue_many([{"task": "t", "run_id": f"h{i}"} for i in range(3)])
    d = app.dispatcher(redis=backend.async_client(), max_backlog=2, rules=False)
    t = await d.tick()
    assert (t.moved, t.backlogged) == (2, False) and d._sleep_s(t) == 0.0
    t = await d.tick()
    assert t.backlogged and t.moved == 0 and d._sleep_s(t) == d.settings.backlog_poll_ms / 1000
    entries = backend.sync.xrange(app.keys.ready)
    backend.sync.xdel(app.keys.ready, entries[0][0])
    t = await d.tick()
    assert (t.moved, t.backlogged, t.next_due_ms) == (1, False, None)
    await d.close()


def test_lookup_with_a_wrong_partition_count_is_refused_not_not_found(backend, queue) -> None:
    backend.app(queue, partitions=4).enqueue("t", delay=60, run_id="a")
    plain = backend.app(queue)  # partitions=1; enqueue on it raises ConfigError
    with pytest.raises(zsched.errors.ConfigError):
        plain.enqueue("t", run_id="b")
    with pytest.raises(zsched.errors.ConfigError):  # today: RunNotFound, the run is there
        plain.get_run("a")


def test_enqueue_many_names_an_item_without_a_task(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(ValueError, match="enqueue_many item 1 has no 'task'"):
        app.enqueue_many([{"task": "t"}, {"payload": 1}])
