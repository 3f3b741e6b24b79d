"""The CLI: --help everywhere, exit 2 on usage errors, --json, one-line errors."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

import zsched
from zsched.cli.main import build_parser, main


def all_commands() -> list[list[str]]:
    out: list[list[str]] = []

    def walk(p: argparse.ArgumentParser, prefix: list[str]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    out.append([*prefix, name])
                    walk(sp, [*prefix, name])

    walk(build_parser(), [])
    return out


@pytest.mark.parametrize("cmd", all_commands(), ids=" ".join)
def test_every_command_has_help(cmd, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--help"])
    assert e.value.code == 0
    assert "usage: zsched" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["enqueue", "t", "--in", "soon"], "--in 'soon' is not a number"),
        (["enqueue", "t", "--in", "-3"], "must be a finite number >= 0"),
        (["enqueue", "t", "--at", "tomorrow"], "--at 'tomorrow' is not an ISO-8601"),
        (["enqueue", "t", "--at", "2030-01-01T09:00:00"], "has no UTC offset"),
        (["enqueue", "t", "--payload", "{oops"], "--payload is not valid JSON"),
        (["worker", "nocolon"], "expected MODULE:APP"),
        (["worker", "no_such_module_xyz:app"], "cannot import module"),
        (["dead", "purge"], "give one or more ENTRY_IDs, or --all"),
        (["bogus"], "invalid choice"),
        (["status", "--watch", "x"], "invalid float value"),
    ],
)
def test_usage_errors_exit_2_and_name_the_bad_value(argv, needle, capsys, redis_url) -> None:
    code = None
    try:
        code = main([*argv, "--redis", redis_url])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert needle in capsys.readouterr().err


def test_unreachable_redis_is_one_line_without_the_password() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "zsched", "status", "--redis", "redis://:s3cret@127.0.0.1:1/0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 1
    assert p.stderr.startswith("zsched: error: cannot reach Redis")
    assert len(p.stderr.strip().splitlines()) == 1
    assert "s3cret" not in p.stderr + p.stdout


def run_json(capsys, *argv: str) -> object:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_enqueue_status_show_and_dead_letters_round_trip(redis_url, queue, capsys) -> None:
    base = ["--redis", redis_url, "--queue", queue]
    out = run_json(capsys, "enqueue", "t", "--payload", '{"a": 1}', "--in", "60", "--id", "x",
                   *base)  # fmt: skip
    assert out == {"run_id": "x", "duplicate": False, "replaced": False, "outcome": "enqueued"}
    assert run_json(capsys, "enqueue", "t", "--id", "x", *base)["duplicate"] is True
    st = run_json(capsys, "status", *base)
    assert (st["delayed"], st["stats"]["duplicate"]) == (1, 1)
    shown = run_json(capsys, "runs", "show", "x", *base)
    assert (shown["state"], shown["task"]) == ("scheduled", "t")
    assert run_json(capsys, "runs", "cancel", "x", *base)["cancelled"] is True
    assert run_json(capsys, "runs", "show", "x", *base)["state"] == "cancelled"
    assert main(["runs", "show", "nobody", *base]) == 1
    assert "no run 'nobody'" in capsys.readouterr().err
    # A dead letter to list, replay and purge.
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("nobody-has-this", None, run_id="d")
    import asyncio

    async def once() -> None:
        d, w = app.dispatcher(), app.worker()
        await d.tick()
        await w.tick()
        await d.close()
        await w.close()

    asyncio.run(once())
    (letter,) = run_json(capsys, "dead", "list", *base)
    assert letter["run_id"] == "d" and "unknown task" in letter["reason"]
    assert run_json(capsys, "dead", "replay", letter["entry_id"], *base)["replayed"] == 1
    asyncio.run(once())
    assert run_json(capsys, "dead", "purge", "--all", *base) == {"purged": 1}
    assert run_json(capsys, "dead", "list", *base) == []


def test_migrate_moves_a_layout_2_delayed_set_and_reports_the_count(redis_url, queue, capsys):
    import redis

    from zsched.protocol.keys import QueueKeys

    k, r = QueueKeys(queue), redis.Redis.from_url(redis_url)
    r.zadd(k.delayed, {"old": 1_700_000_000_000})  # what zsched 0.1 left: one ZSET, no tag
    r.hset(k.runs, "old", b"\x95\x02\xa1t\xc0\xcf\x00\x00\x01\x8b\xcf\xe5h\x00\x00")
    base = ["--redis", redis_url, "--queue", queue]
    assert run_json(capsys, "migrate", *base) == {"queue": queue, "moved": 1}
    assert run_json(capsys, "migrate", *base) == {"queue": queue, "moved": 0}
    assert run_json(capsys, "runs", "show", "old", *base)["state"] == "scheduled"
    r.close()
