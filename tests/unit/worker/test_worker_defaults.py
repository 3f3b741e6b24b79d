"""The worker's defaults: what `zsched worker` runs with no flags."""

from __future__ import annotations

import os
from typing import Any

import pytest

from zsched.cli import processes
from zsched.cli.main import main
from zsched.config import WorkerSettings


def test_the_default_concurrency_is_64_and_the_cli_says_so(capsys) -> None:
    assert WorkerSettings().concurrency == 64
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    assert "(default 64;" in " ".join(capsys.readouterr().out.split())


class _Stop(Exception):
    pass


def _worker_kwargs(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    class FakeApp:
        def worker(self, **kw: Any) -> None:
            seen.update(kw)
            raise _Stop

    monkeypatch.setattr(processes, "load_app", lambda ref, args: FakeApp())
    for k in list(os.environ):
        if k.startswith("ZSCHED_WORKER_"):
            monkeypatch.delenv(k)
    with pytest.raises(_Stop):
        main(["worker", "m:app", *argv])
    return seen


def test_no_flags_leave_the_worker_at_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    kw = _worker_kwargs(monkeypatch, [])
    assert kw.get("concurrency", WorkerSettings.concurrency) == 64
    assert kw.get("read_batch", WorkerSettings.read_batch) == WorkerSettings.read_batch


def test_read_batch_and_concurrency_reach_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    kw = _worker_kwargs(monkeypatch, ["--read-batch", "250", "--concurrency", "300"])
    assert kw["read_batch"] == 250 and kw["concurrency"] == 300
