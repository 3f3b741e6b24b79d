"""Enqueue and rule operations ride through a lost connection or a restart of Redis: bounded
retry with backoff (QueueSettings.outage_retry_ms), the run id fixed before the first attempt,
and past the bound an error naming the queue and the time spent (docs/reliability.md)."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time

import pytest
import redis
from redis_server import RedisServer, free_port
from rel_helpers import Proxy

import zsched
from tests.state import delayed_count
from zsched.observability.metrics import Metrics
from zsched.store.retrying import Backoff
from zsched.store.scripts import source


def test_a_lost_reply_is_retried_inside_enqueue_and_makes_one_run(redis_server, queue, caplog):
    caplog.set_level(logging.INFO)
    proxy = Proxy(redis_server.port)
    app = zsched.App(proxy.url, queue=queue, metrics=Metrics())
    r = redis.Redis.from_url(redis_server.url)
    r.script_load(source("enqueue"))  # else the lost reply could be a NOSCRIPT
    proxy.lose_reply_to(b"EVALSHA")
    rid = app.enqueue("t", delay=60)  # no id given: it is made once, before the first attempt
    assert proxy.lost == 1
    # The first attempt ran; the retry met it. One run, and the caller is not told it was a
    # duplicate: a fresh id can only have met this call's own first attempt.
    assert not rid.duplicate
    k = app.keys
    assert r.hlen(k.runs) == 1 and delayed_count(r, k) == 1
    assert r.hkeys(k.runs) == [rid.encode()]
    assert r.hmget(k.stats, "enqueued", "duplicate") == [b"1", b"1"]
    assert app.metrics.enqueued.labels(queue)._value.get() == 1
    # One line when the outage began, one when it ended.
    warnings = [x for x in caplog.records if "lost Redis" in x.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert any("reached Redis again" in x.getMessage() for x in caplog.records)
    r.close()
    app.close()
    proxy.close()


def test_enqueue_many_with_lost_reply_marks_only_given_ids_as_duplicates(redis_server, queue):
    proxy = Proxy(redis_server.port)
    app = zsched.App(proxy.url, queue=queue, metrics=Metrics())
    r = redis.Redis.from_url(redis_server.url)
    r.script_load(source("enqueue"))
    proxy.lose_reply_to(b"EVALSHA")
    ids = app.enqueue_many([("t", 1), {"task": "t", "run_id": "mine"}, {"task": "t"}])
    assert proxy.lost == 1
    # "mine" is ambiguous (the caller may have enqueued it before): reported as a duplicate.
    assert [x.duplicate for x in ids] == [False, True, False]
    assert r.hlen(app.keys.runs) == 3
    r.close()
    app.close()
    proxy.close()


def _lost_redis_logged(caplog, what: str) -> bool:
    return any(r.getMessage().startswith(f"{what} lost Redis") for r in list(caplog.records))


def _during_restart(srv: RedisServer, caplog, what: str, call) -> dict[str, object]:
    """Kill `srv`, run `call` in a thread, start `srv` again once `call` has failed once."""
    srv.kill()
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = call()
            result["at"] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertion
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while not _lost_redis_logged(caplog, what) and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    result["back"] = time.monotonic()
    srv.start()
    t.join(30)
    return result


def test_enqueue_and_rule_operations_wait_through_a_redis_restart(tmp_path, queue, caplog):
    caplog.set_level(logging.INFO)
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    srv = RedisServer(*aof, dir=str(tmp_path)).start()
    try:
        app = zsched.App(srv.url, queue=queue, metrics=Metrics())
        app.enqueue("t", run_id="before", delay=60)
        got = _during_restart(srv, caplog, "enqueue",
                              lambda: app.enqueue("t", run_id="during", delay=60))  # fmt: skip
        assert "error" not in got, got
        assert got["value"] == "during" and not got["value"].duplicate  # type: ignore[union-attr]
        assert got["at"] > got["back"]  # it returned after Redis came back, not before
        caplog.clear()
        what = "schedule 'hourly'"
        got = _during_restart(srv, caplog, what,
                              lambda: app.schedule("hourly", "t", cron="0 * * * *", tz="UTC"))  # fmt: skip
        assert got.get("value") == zsched.ScheduleResult.CREATED, got
        caplog.clear()
        got = _during_restart(srv, caplog, "pause of schedule 'hourly'",
                              lambda: app.pause_schedule("hourly"))  # fmt: skip
        assert got.get("value") is True, got
        assert app.status().delayed == 2
        assert [i.schedule_id for i in app.schedules()] == ["hourly"]
        app.close()
    finally:
        srv.stop()


def test_past_the_bound_the_error_names_the_queue_and_the_time_spent(queue) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    app = zsched.App(down, queue=queue, metrics=Metrics(),
                     settings=zsched.QueueSettings(outage_retry_ms=700))  # fmt: skip
    with pytest.raises(zsched.RedisUnavailable) as info:
        app.enqueue("t", run_id="r1")
    msg = str(info.value)
    assert f"enqueue in queue {queue!r} failed after" in msg
    attempts = int(re.search(r"after [\d.]+s and (\d+) attempt", msg).group(1))  # type: ignore[union-attr]
    assert attempts >= 2  # it did retry
    assert isinstance(info.value, redis.exceptions.ConnectionError)  # old handlers still match
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    with pytest.raises(zsched.RedisUnavailable, match=f"schedule 'r' in queue {queue!r}"):
        app.schedule("r", "t", every=60)
    app.close()


def test_the_backoff_doubles_to_its_cap_and_starts_over() -> None:
    b = Backoff(0.1, 1.0)
    assert [b.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.1


def test_a_durable_retry_does_not_take_an_older_write_for_its_own(queue) -> None:
    """The first attempt's reply is lost; the retry, on a fresh connection, finds its runs
    there. WAIT waits for the connection's last write: had the retry written nothing, WAIT
    would count a replica that never got the runs. It does write (the duplicate count), so
    with the replica stopped the retry is not acknowledged either."""
    from cluster_harness import FAST, wait_until

    with RedisServer(*FAST) as master, RedisServer("--replicaof", "127.0.0.1",
                                                   str(master.port)) as rep:  # fmt: skip
        r = redis.Redis(port=rep.port)
        wait_until(lambda: r.info("replication")["master_link_status"] == "up", 30, "the link")
        r.close()
        m = redis.Redis(port=master.port)
        m.script_load(source("enqueue"))
        proxy = Proxy(master.port)
        app = zsched.App(proxy.url, queue=queue, durable=True, durable_timeout=0.1,
                         settings=zsched.QueueSettings(outage_retry_ms=1000),
                         metrics=Metrics())  # fmt: skip
        assert rep.proc is not None
        rep.proc.send_signal(signal.SIGSTOP)  # connected, but acknowledges nothing
        try:
            proxy.lose_reply_to(b"EVALSHA")
            with pytest.raises(zsched.NotReplicated, match="no replica acknowledged"):
                app.enqueue("t", run_id="r1")
            assert proxy.lost == 1
        finally:
            rep.proc.send_signal(signal.SIGCONT)
        assert m.hexists(app.keys.runs, "r1")  # written on the master all along
        m.close()
        app.close()
        proxy.close()
