"""The runnable (```python) examples of docs/async.md and docs/typed-tasks.md run; ```py
blocks are fragments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import zsched

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


def test_the_async_example_runs_against_a_real_server(redis_url, queue, tmp_path) -> None:
    (code,) = _blocks("async.md")
    code = code.replace("redis://127.0.0.1:6379/0", redis_url).replace('"shop"', f'"{queue}"')
    (tmp_path / "ex.py").write_text(code)
    out = subprocess.run([sys.executable, str(tmp_path / "ex.py")], capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == ["scheduled", "1"]
    assert zsched.App(redis_url, queue).status().delayed == 1


def test_the_typed_tasks_example_runs(tmp_path) -> None:
    (code,) = _blocks("typed-tasks.md")
    (tmp_path / "ex.py").write_text(code)
    out = subprocess.run([sys.executable, str(tmp_path / "ex.py")], capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    assert out.stdout.splitlines() == [
        "payload lacks field(s) of Order: email",
        "receipt for order 42 to a@example.com",
    ]
