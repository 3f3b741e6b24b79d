"""docs/testing.md's examples run as a user's test suite would run them: each python block is
a test module, run by pytest in a fresh folder with the installed plugin (entry point)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_doc_has_its_examples() -> None:
    assert len(BLOCKS) == 3
    assert any("America/New_York" in b and "spring_forward" in b for b in BLOCKS)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_a_doc_example_passes_as_a_user_test_module(tmp_path: Path, i: int) -> None:
    path = tmp_path / f"test_doc_example_{i}.py"
    path.write_text(BLOCKS[i])
    # A user's pytest configuration (pytest-asyncio warns when its loop scope is unset).
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    tests = re.findall(r"^(?:async )?def (test_\w+)", BLOCKS[i], re.M)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error",
         str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(tests)} passed" in out.stdout
