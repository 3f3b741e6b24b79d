"""A password in the Redis URL never shows in logs, /metrics, --help or error messages."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import pytest
import redis
from redis_server import free_port
from sec_helpers import AuthServer, cli, env_for, scrape, spawn, stop, wait_for

import zsched
from zsched.cli.main import build_parser, main

SECRET = "Canary-pw-93f1e7"
MARKERS = (SECRET, SECRET.lower(), "93f1e7")  # also catches a lower-cased or cut copy


def leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


def output(args: list[str], env: dict[str, str]) -> str:
    out = cli(args, env)
    return out.stdout + out.stderr


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list:
    out = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += command_paths(sub, (*prefix, name))
    return out


def test_logs_and_metrics_of_running_processes_hold_no_password(redis_server, tmp_path: Path,
                                                                 queue: str) -> None:  # fmt: skip
    with AuthServer(SECRET, "--requirepass", SECRET) as srv:
        url = f"redis://default:{SECRET}@127.0.0.1:{srv.port}/0"
        env = env_for(url, redis_server.url)
        ports = [free_port(), free_port()]
        logs = [tmp_path / "dispatcher.log", tmp_path / "worker.log", tmp_path / "down.log"]
        app_ref = "security.sec_app:app"
        procs = [
            spawn(logs[0], ["-vv", "dispatcher", "--app", app_ref, "--queue", queue,
                            "--metrics-port", str(ports[0])], env),
            spawn(logs[1], ["-vv", "worker", app_ref, "--queue", queue, "--metrics-port",
                            str(ports[1])], env),
        ]  # fmt: skip
        # A worker that cannot reach its Redis logs its retries; the URL has the password too.
        down = f"redis://default:{SECRET}@127.0.0.1:{free_port()}/0"
        procs.append(spawn(logs[2], ["-vv", "--log-format", "json", "worker", app_ref, "--queue",
                                     queue], env_for(down, redis_server.url)))  # fmt: skip
        try:
            q = ["--queue", queue]
            texts = [output(["enqueue", "quick", "--id", "c1", *q], env),
                     output(["enqueue", "nope", "--id", "c2", *q], env)]  # fmt: skip
            sink = redis.Redis.from_url(redis_server.url)
            wait_for(lambda: sink.lrange(f"sec:{queue}:executed", 0, -1), "a run")
            wait_for(lambda: zsched.App(url, queue=queue).dead_letters(), "a dead letter")
            wait_for(lambda: "retrying in" in logs[2].read_text(), "the retries of the worker")
            texts += [scrape(p) for p in ports]
            for c in (["status"], ["dead", "list"], ["runs", "show", "c1"], ["schedules", "list"]):
                texts.append(output([*c, *q], env))
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            stop(procs)
    texts += [p.read_text() for p in logs]
    assert "zsched_runs_dispatched_total" in texts[2]
    assert "DEBUG" in logs[0].read_text()  # the most verbose level was on
    json_lines = [json.loads(line) for line in logs[2].read_text().splitlines() if line]
    assert json_lines and all(line["logger"].startswith("zsched") for line in json_lines)
    assert [leaks(t) for t in texts] == [[] for _ in texts]


def test_help_of_every_command_holds_no_password(monkeypatch, capsys) -> None:
    monkeypatch.setenv("ZSCHED_REDIS_URL", f"redis://zsched:{SECRET}@redis.internal:6379/0")
    paths = command_paths(build_parser())
    assert len(paths) > 10
    for path in paths:
        with pytest.raises(SystemExit):
            main([*path, "--help"])
        out = capsys.readouterr()
        assert leaks(out.out + out.err) == [], path


@pytest.mark.parametrize(
    "url",
    [
        f"redis://nobody:{SECRET}@127.0.0.1:{{port}}/0",  # refused credentials
        f"redis://:{SECRET}@127.0.0.1:1/0",  # unreachable
        f"http://user:{SECRET}@127.0.0.1:{{port}}/0",  # bad scheme
        f"redis://user:{SECRET}@127.0.0.1:notaport/0",  # bad port
        f"redis+sentinel://:{SECRET}@127.0.0.1:1",  # no service name
        f"redis+cluster://:{SECRET}@",  # no node
    ],
)
def test_errors_about_a_url_hold_no_password(url: str, capsys) -> None:
    with AuthServer("another-password", "--requirepass", "another-password") as srv:
        url = url.replace("{port}", str(srv.port))
        assert main(["status", "--redis", url]) != 0
        out = capsys.readouterr()
        assert out.err.startswith("zsched: error:") and len(out.err.strip().splitlines()) == 1
        assert leaks(out.out + out.err) == [], out.err
        try:
            app = zsched.App(url, queue="q")
            text = repr(app.redis) + repr(app.redis.connection_pool)
            app.status()
        except Exception as exc:  # noqa: BLE001 - whatever is raised, its text must be clean
            text = str(exc) + repr(exc)
        assert leaks(text) == [], text
