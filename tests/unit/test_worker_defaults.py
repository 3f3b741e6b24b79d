"""The worker's defaults: what `zsched worker` runs with no flags, and --read-batch."""

from __future__ import annotations

from typing import Any

import pytest

from zsched.cli import processes
from zsched.cli.main import build_parser, main
from zsched.config import WorkerSettings


def test_the_cli_defaults_are_the_worker_settings_defaults() -> None:
    args = build_parser().parse_args(["worker", "m:app"])
    assert args.concurrency == WorkerSettings.concurrency == 64
    assert args.read_batch == WorkerSettings.read_batch


class _Stop(Exception):
    pass


def test_read_batch_reaches_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class FakeApp:
        def worker(self, **kw: Any) -> None:
            seen.update(kw)
            raise _Stop

    monkeypatch.setattr(processes, "_at_start", lambda build, role: FakeApp())
    with pytest.raises(_Stop):
        main(["worker", "m:app", "--read-batch", "250", "--concurrency", "300"])
    assert seen["read_batch"] == 250 and seen["concurrency"] == 300


def test_a_read_batch_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "m:app", "--read-batch", "0"]) == 2
    assert "--read-batch must be >= 1, got 0" in capsys.readouterr().err
