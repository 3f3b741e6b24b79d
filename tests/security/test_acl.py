"""The ACL rule set of docs/security.md: zsched works with nothing more, and nothing more is
allowed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis_server import free_port
from sec_helpers import AuthServer, acl_rule, cli, env_for, scrape, spawn, stop, wait_for

PASSWORD = "zs-acl-Pw-7f3e9c"
ADMIN = "admin-Pw-1c9d0b"


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[AuthServer]:
    users = tmp_path / "users.acl"
    users.write_text(f"{acl_rule(PASSWORD)}\nuser default on >{ADMIN} ~* &* +@all\n")
    with AuthServer(ADMIN, "--aclfile", str(users)) as srv:
        yield srv


def test_dispatcher_worker_and_cli_run_everything_as_the_zsched_user(
    acl_server: AuthServer, redis_server, tmp_path: Path, queue: str
) -> None:
    url = f"redis://zsched:{PASSWORD}@127.0.0.1:{acl_server.port}/0"
    env = env_for(url, redis_server.url)
    sink = redis.Redis.from_url(redis_server.url)
    executed = f"sec:{queue}:executed"
    app_ref = "security.sec_app:app"
    logs = [tmp_path / "dispatcher.log", tmp_path / "worker.log"]
    port = free_port()
    procs = [
        spawn(logs[0], ["-v", "dispatcher", "--app", app_ref, "--queue", queue,
                        "--metrics-port", str(port)], env),
        spawn(logs[1], ["-v", "worker", app_ref, "--queue", queue, "--visibility-timeout", "2"],
              env),
    ]  # fmt: skip
    q = ["--queue", queue]
    try:
        assert cli(["enqueue", "quick", "--id", "r1", *q], env).returncode == 0
        assert cli(["enqueue", "not-registered", "--id", "d1", *q], env).returncode == 0
        assert cli(["enqueue", "quick", "--id", "later", "--in", "3600", *q], env).returncode == 0
        ran = lambda: {x.decode() for x in sink.lrange(executed, 0, -1)}  # noqa: E731
        wait_for(lambda: "r1" in ran() and any(x.startswith("sec-every-second@") for x in ran()),
                 "a run and a rule fire")  # fmt: skip
        dead = lambda: json.loads(cli(["dead", "list", "--json", *q], env).stdout)  # noqa: E731
        wait_for(lambda: [d["run_id"] for d in dead()] == ["d1"], "the dead letter")
        for args in (["status", "--json"], ["runs", "show", "r1", "--json"],
                     ["runs", "cancel", "later"], ["dead", "replay", "--all"],
                     ["schedules", "list"], ["dead", "purge", "--all"]):  # fmt: skip
            out = cli([*args, *q], env)
            assert out.returncode == 0, (args, out.stderr)
        # The queue gauges are read from Redis at scrape time, as this user too.
        assert f'zsched_collector_up{{queue="{queue}"}} 1.0' in scrape(port)
    finally:
        codes = stop(procs)
    assert codes == [0, 0], [p.read_text() for p in logs]
    text = "".join(p.read_text() for p in logs)
    assert "NOPERM" not in text and "Traceback" not in text
    # Nothing zsched did was refused.
    assert acl_server.admin().acl_log() == []


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",),
        ("CONFIG", "GET", "*"),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("ACL", "LIST"),
        ("CLIENT", "LIST"),
        ("SCRIPT", "FLUSH"),
        ("CLIENT", "KILL", "ID", "1"),
        ("SHUTDOWN", "NOSAVE"),
        ("SET", "other:key", "1"),
        ("GET", "other:key"),
        ("LPUSH", "zsched:{q}:list", "a"),
        ("EVAL", "return redis.call('GET', KEYS[1])", "1", "other:key"),
        ("EVAL", "return redis.call('FLUSHDB')", "0"),
        ("PUBLISH", "other-channel", "x"),
    ],
)
def test_commands_keys_and_channels_outside_the_set_are_refused(acl_server, command) -> None:
    z = redis.Redis(port=acl_server.port, username="zsched", password=PASSWORD)
    assert z.set("zsched:{q}:ok", 1)  # the user works
    with pytest.raises(
        redis.exceptions.ResponseError,
        match="NOPERM|No permissions|permission|can't run this command",
    ):
        z.execute_command(*command)
    assert acl_server.admin().dbsize() == 1
