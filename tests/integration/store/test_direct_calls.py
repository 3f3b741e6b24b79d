"""The direct EVALSHA path of sync script calls (zsched/store/direct.py) on a real server.

It skips redis-py's per-command machinery, so it has to get right by itself what that
machinery does: load a flushed script, replace a connection the server closed, keep a
connection usable after a script error, close its connections, and never run a call twice.
"""

from __future__ import annotations

import os

import pytest
import redis
from redis_server import RedisServer

import zsched
from tests.state import delayed_count
from zsched.observability.metrics import Metrics
from zsched.store import scripts as S


@pytest.fixture
def app(redis_server, queue):
    a = zsched.App(redis_server.url, queue=queue, metrics=Metrics())
    yield a
    a.close()


def _direct_ids(app: zsched.App) -> set[int]:
    """Client ids (CLIENT ID) of the direct path's idle connections."""
    out = set()
    for c in app.scripts._direct._idle:  # type: ignore[union-attr]
        c.conn.send_command("CLIENT", "ID")
        out.add(int(c.conn.read_response()))
    return out


def test_a_plain_client_enqueues_on_one_direct_connection(app) -> None:
    for i in range(5):
        assert not app.enqueue("t", run_id=f"r{i}", delay=60).duplicate
    assert len(app.scripts._direct._idle) == 1  # type: ignore[union-attr]
    assert delayed_count(app.redis, app.keys) == 5


def test_a_flushed_script_is_loaded_again(app, redis_server) -> None:
    app.enqueue("t", run_id="a", delay=60)
    r = redis.Redis.from_url(redis_server.url)
    r.script_flush()
    assert not app.enqueue("t", run_id="b", delay=60).duplicate
    assert r.script_exists(app.scripts._scripts["enqueue"].sha) == [True]
    assert delayed_count(app.redis, app.keys) == 2
    r.close()


def test_a_connection_the_server_closed_is_replaced_before_the_send(app, redis_server) -> None:
    app.enqueue("t", run_id="a", delay=60)
    (old,) = _direct_ids(app)
    r = redis.Redis.from_url(redis_server.url)
    assert r.client_kill_filter(_id=old) == 1
    # The closed connection is noticed before anything is sent on it: no error, no retry that
    # could report our own run as a duplicate.
    assert not app.enqueue("t", run_id="b", delay=60).duplicate
    assert _direct_ids(app) != {old}
    assert r.hget(app.keys.stats, "duplicate") is None
    r.close()


def test_a_script_error_leaves_the_connection_usable(app) -> None:
    app.redis.set(app.keys.done, "not a zset")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE zsched enqueue"):
        app.enqueue("t", run_id="a", delay=60)
    app.redis.delete(app.keys.done)
    assert not app.enqueue("t", run_id="a", delay=60).duplicate
    assert len(app.scripts._direct._idle) == 1  # type: ignore[union-attr]


def test_close_closes_the_direct_connections(app, redis_server) -> None:
    app.enqueue("t", run_id="a", delay=60)
    (cid,) = _direct_ids(app)
    app.close()
    r = redis.Redis.from_url(redis_server.url)
    assert cid not in {int(c["id"]) for c in r.client_list()}
    r.close()


def test_a_forked_child_opens_its_own_connection(app) -> None:
    app.enqueue("t", run_id="parent", delay=60)
    (parent_conn,) = _direct_ids(app)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: enqueue, report the connection it used, exit at once
        try:
            ok = app.enqueue("t", run_id="child", delay=60).duplicate is False
            (child_conn,) = _direct_ids(app)
            os.write(write, f"{int(ok)} {child_conn}".encode())
        finally:
            os._exit(0)
    os.close(write)
    ok, child_conn = os.read(read, 100).decode().split()
    os.waitpid(pid, 0)
    assert ok == "1" and int(child_conn) != parent_conn
    assert _direct_ids(app) == {parent_conn}  # the parent's connection is untouched
    assert not app.enqueue("t", run_id="again", delay=60).duplicate


def test_cluster_and_single_connection_clients_keep_redis_pys_path(redis_server) -> None:
    single = redis.Redis.from_url(redis_server.url, single_connection_client=True)
    assert S.Scripts(single)._direct is None
    assert S.Scripts(redis.Redis.from_url(redis_server.url))._direct is not None
    single.close()


@pytest.mark.parametrize("spin_us", [0, 200])
def test_sync_calls_work_with_or_without_spinning(redis_server, queue, spin_us) -> None:
    app = zsched.App(redis_server.url, queue=queue, spin_us=spin_us)
    assert not app.enqueue("t", {"x": 1}, run_id="a", delay=60).duplicate
    assert app.enqueue("t", {"x": 1}, run_id="a", delay=60).duplicate
    assert app.get_run("a").state == "scheduled"
    assert app.cancel("a")
    assert not app.cancel("a")
    assert len(app.scripts._direct._idle) == 1  # type: ignore[union-attr]
    app.close()


def test_a_client_that_decodes_replies_to_text_is_refused(redis_server) -> None:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    with pytest.raises(zsched.ConfigError, match="decode_responses=False"):
        zsched.App(client, queue="x")
    client.close()


@pytest.mark.parametrize("bad", [-1, 1.5, "200"])
def test_a_spin_budget_that_is_not_whole_microseconds_is_refused(redis_url, bad) -> None:
    with pytest.raises(ValueError, match="spin_us must be a whole number of microseconds"):
        zsched.App(redis_url, queue="x", spin_us=bad)


def test_close_also_closes_the_direct_connections_of_partition_views(redis_server, queue) -> None:
    app = zsched.App(redis_server.url, queue=queue, partitions=2)
    views = app.partition_views()
    for v in views:
        assert not v.cancel("not-there")  # a sync call on the view's own direct path
    ids = set().union(*(_direct_ids(v) for v in views))
    assert len(ids) == 2
    app.close()
    r = redis.Redis.from_url(redis_server.url)
    assert not ids & {int(c["id"]) for c in r.client_list()}
    r.close()


def test_a_unix_socket_client_takes_the_direct_path_with_its_own_reader(tmp_path) -> None:
    sock = str(tmp_path / "redis.sock")
    with RedisServer("--unixsocket", sock, "--unixsocketperm", "700"):
        app = zsched.App(f"unix://{sock}", queue="u")
        assert not app.enqueue("t", {"x": 1}, run_id="a", delay=60).duplicate
        assert app.enqueue("t", {"x": 1}, run_id="a", delay=60).duplicate
        assert app.get_run("a").state == "scheduled"
        (c,) = app.scripts._direct._idle  # type: ignore[union-attr]
        assert c.reader is not None  # read with our hiredis reader, not redis-py's
        assert app.cancel("a")
        app.close()


# -- many calls streamed on one connection (enqueue_many) ------------------------------------


def _many(n: int, prefix: str) -> list[dict]:
    return [{"task": "t", "payload": i, "run_id": f"{prefix}{i}", "delay": 60} for i in range(n)]


def test_enqueue_many_streams_its_calls_on_one_direct_connection(app) -> None:
    ids = app.enqueue_many(_many(1050, "a"))  # 11 calls of up to 100 runs
    assert [str(i) for i in ids] == [f"a{i}" for i in range(1050)]
    assert len(app.scripts._direct._idle) == 1  # type: ignore[union-attr]
    assert delayed_count(app.redis, app.keys) == 1050
    again = app.enqueue_many(_many(1050, "a"))
    assert all(i.duplicate for i in again)


def test_streamed_calls_after_a_script_flush_are_loaded_and_run_once(app, redis_server) -> None:
    app.enqueue("t", run_id="warm", delay=60)
    r = redis.Redis.from_url(redis_server.url)
    r.script_flush()
    ids = app.enqueue_many(_many(350, "b"))
    assert not any(i.duplicate for i in ids), "a call answered NOSCRIPT did not run: run it now"
    assert delayed_count(app.redis, app.keys) == 351
    r.close()


def test_a_script_error_among_streamed_calls_is_raised_and_the_connection_kept(
    app, redis_server
) -> None:
    r = redis.Redis.from_url(redis_server.url)
    r.set(app.keys.done, "not a zset")  # every enqueue call now fails: WRONGTYPE
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        app.enqueue_many(_many(250, "c"))
    (conn_id,) = _direct_ids(app)  # read every reply: the connection went back to the pool
    r.delete(app.keys.done)
    assert not any(i.duplicate for i in app.enqueue_many(_many(250, "c")))
    assert _direct_ids(app) == {conn_id}
    r.close()
