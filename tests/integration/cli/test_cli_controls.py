"""The CLI's run controls: `zsched runs reschedule`, with --json and readable text."""

from __future__ import annotations

import json

import zsched
from zsched.cli.main import main


def test_runs_reschedule_moves_a_delayed_run_and_tells_why_it_cannot(redis_url, queue, capsys):
    base = ["--redis", redis_url, "--queue", queue]
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("t", None, run_id="x", delay=3600)
    assert main(["runs", "reschedule", "x", "--at", "2031-01-01T09:00:00+01:00", *base,
                 "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out == {"run_id": "x", "outcome": "moved", "moved": True, "due_ms": 1925020800000}
    assert app.get_run("x").run_at.isoformat() == "2031-01-01T08:00:00+00:00"
    assert main(["runs", "reschedule", "x", "--in", "5", *base]) == 0
    assert capsys.readouterr().out.startswith("moved: due ")
    assert main(["runs", "reschedule", "nobody", "--in", "5", *base]) == 1
    assert "not moved: no such run" in capsys.readouterr().out
    assert main(["runs", "reschedule", "nobody", "--in", "5", *base, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["outcome"] == "not_found"
    app.close()


def test_runs_reschedule_needs_one_time_and_refuses_a_bad_one(redis_url, queue, capsys):
    base = ["--redis", redis_url, "--queue", queue]
    for argv in (
        ["x"],
        ["x", "--in", "-1"],
        ["x", "--at", "tomorrow"],
        ["x", "--at", "2030-01-01T00:00"],
    ):
        try:
            code = main(["runs", "reschedule", *argv, *base])
        except SystemExit as exc:
            code = int(exc.code or 0)
        assert code == 2, argv
    err = capsys.readouterr().err
    assert "--in '-1'" in err and "not an ISO-8601 time" in err and "no UTC offset" in err


def test_enqueue_on_conflict_replace_and_debounce(redis_url, queue, capsys):
    base = ["--redis", redis_url, "--queue", queue, "--id", "d", "--json"]

    def enqueue(*argv: str) -> dict:
        assert main(["enqueue", "t", *argv, *base]) == 0
        return json.loads(capsys.readouterr().out)

    assert enqueue("--in", "60")["outcome"] == "enqueued"
    assert enqueue("--in", "60")["outcome"] == "duplicate"
    out = enqueue("--in", "30", "--payload", "[2]", "--on-conflict", "replace")
    assert (out["outcome"], out["replaced"], out["duplicate"]) == ("replaced", True, False)
    out = enqueue("--in", "3600", "--on-conflict", "debounce", "--max-delay", "120")
    assert out["outcome"] == "debounced"
    app = zsched.App(redis_url, queue=queue)
    st = app.get_run("d")
    assert st.run_at is not None and st.state == "scheduled"
    assert app.status().stats["debounced"] == 1 and app.status().stats["replaced"] == 1
    app.close()
    try:
        code = main(["enqueue", "t", "--on-conflict", "debounce", *base])
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 2
    assert "needs --max-delay" in capsys.readouterr().err
