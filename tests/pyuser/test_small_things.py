"""A new user's first steps: importing the demo, the worker's settings, the version."""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import zsched
from zsched.cli.main import build_parser
from zsched.cli.settings_options import (
    DISPATCHER_OPTIONS,
    WORKER_OPTIONS,
    dispatcher_values,
    worker_values,
)
from zsched.config import DispatcherSettings, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_demo_opens_no_redis_connection() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    code = ("import zsched.demo as d; assert d.app.tasks; "
            f"import socket; s = socket.create_connection(('127.0.0.1', {port})); s.close()")  # fmt: skip
    env = {"ZSCHED_REDIS_URL": f"redis://127.0.0.1:{port}/0", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    # Every connection the child made is in the listen backlog now (the kernel completes
    # them without accept): take them all, without waiting.
    listener.setblocking(False)
    accepted = []
    while True:
        try:
            accepted.append(listener.accept()[0])
        except BlockingIOError:
            break
    listener.close()
    # Exactly one connection: the probe the child opened after the import, none before it.
    assert len(accepted) == 1
    for s in accepted:
        s.close()


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_the_worker_cli_has_a_flag_for_every_worker_setting() -> None:
    assert {o.field for o in WORKER_OPTIONS} == {f.name for f in dataclasses.fields(WorkerSettings)}
    assert {o.field for o in DISPATCHER_OPTIONS} == {
        f.name for f in dataclasses.fields(DispatcherSettings)
    }
    args = _parse("worker", "m:app", "--read-batch", "250", "--visibility-timeout", "2.5",
                  "--block", "0.2", "--max-deliveries", "9", "--max-backoff", "60")  # fmt: skip
    assert worker_values(args, {}) == {
        "read_batch": 250, "visibility_timeout_ms": 2500, "block_ms": 200,
        "max_deliveries": 9, "max_backoff_ms": 60_000,
    }  # fmt: skip
    assert WorkerSettings(**worker_values(args, {})).read_batch == 250


def test_a_flag_beats_its_environment_variable_which_beats_the_default() -> None:
    env = {"ZSCHED_WORKER_READ_BATCH": "300", "ZSCHED_WORKER_CONCURRENCY": "4"}
    assert worker_values(_parse("worker", "m:app"), env) == {"read_batch": 300, "concurrency": 4}
    flagged = _parse("worker", "m:app", "--read-batch", "7")
    assert worker_values(flagged, env) == {"read_batch": 7, "concurrency": 4}
    d = _parse("dispatcher", "--max-idle", "1.5")
    assert dispatcher_values(d, {"ZSCHED_DISPATCHER_BATCH_SIZE": "200"}) == {
        "batch_size": 200, "max_idle_ms": 1500,
    }  # fmt: skip


def test_the_old_name_of_backlog_poll_still_works_everywhere_with_a_warning(capsys) -> None:
    # held_poll_ms was renamed ("held" is a worker's hold on an entry); users' settings keep working.
    with pytest.warns(DeprecationWarning, match="held_poll_ms is deprecated: use backlog_poll_ms"):
        old = DispatcherSettings(held_poll_ms=7)
    assert old.backlog_poll_ms == 7 and old.held_poll_ms == 7
    assert dataclasses.replace(old, max_idle_ms=5).backlog_poll_ms == 7
    with pytest.warns(DeprecationWarning):
        env = dispatcher_values(_parse("dispatcher"), {"ZSCHED_DISPATCHER_HELD_POLL_MS": "9"})
    assert env == {"backlog_poll_ms": 9}
    assert dispatcher_values(_parse("dispatcher", "--held-poll", "0.05"), {}) == {
        "backlog_poll_ms": 50
    }
    assert "--held-poll is deprecated, use --backlog-poll" in capsys.readouterr().err
    with pytest.raises(zsched.ConfigError, match="held_poll_ms is the deprecated name of"):
        DispatcherSettings(held_poll_ms=1, backlog_poll_ms=2)


def test_an_unknown_worker_variable_is_refused_naming_it() -> None:
    with pytest.raises(zsched.ConfigError, match="readbatch"):
        worker_values(_parse("worker", "m:app"), {"ZSCHED_WORKER_READBATCH": "5"})


def test_operations_md_lists_every_setting_with_its_flag_and_variable() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    rows = re.findall(r"^\| (worker|dispatcher) \| `(\w+)` \| `(--[\w-]+)[^`]*` \| `(\w+)` \|",
                      text, re.M)  # fmt: skip
    want = [("worker", o.field, o.flag, o.env("ZSCHED_WORKER_")) for o in WORKER_OPTIONS]
    want += [("dispatcher", o.field, o.flag, o.env("ZSCHED_DISPATCHER_"))
             for o in DISPATCHER_OPTIONS]  # fmt: skip
    assert rows == want


def test_the_version_is_defined_once() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    attr = pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "zsched._version.__version__"
    out = subprocess.run([sys.executable, "-m", "zsched", "--version"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == f"zsched {zsched.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", zsched.__version__)
    from importlib.metadata import version

    assert version("zsched") == zsched.__version__
