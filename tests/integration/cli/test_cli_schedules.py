"""`zsched schedules ...` end to end against a real redis-server."""

from __future__ import annotations

import json

import pytest

from zsched.cli.main import main


def run(capsys, *argv: str) -> object:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_schedules_lifecycle_through_the_cli(redis_url, queue, capsys) -> None:
    base = ["--redis", redis_url, "--queue", queue]
    add = ["schedules", "add", "nightly", "report", "--cron", "0 2 * * *", "--tz",
           "Europe/Berlin", "--misfire", "catch_up", "--max-catch-up", "3"]  # fmt: skip
    assert run(capsys, *add, *base)["result"] == "created"
    assert run(capsys, *add, *base)["result"] == "unchanged"
    (info,) = run(capsys, "schedules", "list", *base)
    assert (info["schedule_id"], info["misfire"], info["paused"]) == ("nightly", "catch_up", False)
    nxt = run(capsys, "schedules", "next", "nightly", "--count", "3", *base)
    assert len(nxt) == 3 and all(r["local"].endswith(("+01:00", "+02:00")) for r in nxt)
    assert all("T02:00:00" in r["local"] for r in nxt)
    edit = run(capsys, "schedules", "edit", "nightly", "--cron", "30 3 * * *", *base)
    assert edit["result"] == "updated"
    assert "T03:30:00" in run(capsys, "schedules", "next", "nightly", *base)[0]["local"]
    assert run(capsys, "schedules", "pause", "nightly", *base)["paused"] is True
    assert run(capsys, "schedules", "list", *base)[0]["paused"] is True
    assert run(capsys, "schedules", "resume", "nightly", *base)["resumed"] is True
    n = run(capsys, "schedules", "backfill", "nightly", "--from", "2026-01-01T00:00:00Z",
            "--to", "2026-01-03T23:59:00Z", *base)  # fmt: skip
    assert n["enqueued"] == 3
    hist = run(capsys, "schedules", "history", "nightly", *base)
    assert [h["outcome"] for h in hist] == ["backfilled"] * 3
    assert main(["schedules", "audit", *base, "--json"]) == 0
    capsys.readouterr()
    sim = run(capsys, "schedules", "simulate", "nightly", "--down",
              "2026-03-01T00:00:00+01:00..2026-03-05T12:00:00+01:00", *base)  # fmt: skip
    outcomes = [r["outcome"] for r in sim]
    assert outcomes[:5] == ["skipped", "skipped", "ran_late", "ran_late", "ran_late"]
    assert run(capsys, "schedules", "rm", "nightly", *base)["removed"] is True
    assert run(capsys, "schedules", "list", *base) == []


def test_simulate_says_plainly_that_a_rule_is_paused(redis_url, queue, capsys) -> None:
    """A paused rule simulates paused (each slot `skipped: paused`), under a first line that
    says so; --as-resumed shows what its policies would do had it been resumed before FROM."""
    base = ["--redis", redis_url, "--queue", queue]
    run(capsys, "schedules", "add", "hb", "t", "--every", "60", "--misfire", "skip", *base)
    run(capsys, "schedules", "pause", "hb", "--note", "db migration", "--by", "ops", *base)
    sim = ["schedules", "simulate", "hb", "--down", "2030-01-01T00:00:00Z..2030-01-01T00:05:00Z"]
    assert main([*sim, *base]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    assert head.startswith("hb is paused since ") and "(paused by ops: db migration)" in head
    assert "fires nothing while paused" in head and "--as-resumed" in head
    assert len(rows) == 11 and all("skipped    paused by ops: db migration" in r for r in rows)
    outcomes = [r["outcome"] for r in run(capsys, *sim, "--as-resumed", *base)]
    assert outcomes == ["skipped"] * 5 + ["ran"] * 6
    assert main([*sim, "--as-resumed", *base]) == 0
    assert "resumed before FROM" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["add", "x", "t", "--cron", "0 2 * * *"], "time zone"),
        (["add", "x", "t", "--cron", "61 * * * *", "--tz", "UTC"], "minute"),
        (["add", "x", "t", "--cron", "0 2 * * *", "--tz", "Mars/Base"], "Mars/Base"),
        (["add", "x", "t", "--every", "-5"], "--every '-5'"),
        (["add", "x", "t"], "one of the arguments --cron --every is required"),
        (["simulate", "x", "--down", "yesterday"], "expected FROM..TO"),
        (["next", "x", "--count", "0"], "--count must be >= 1"),
    ],
)
def test_schedule_usage_errors_exit_2_naming_the_value(redis_url, queue, capsys, argv, needle):
    code = None
    try:
        code = main(["schedules", *argv, "--redis", redis_url, "--queue", queue])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert needle in capsys.readouterr().err
