"""The README's "From a Python application" examples run: the AsyncApp one against a real
redis-server, the testing one as a user's pytest module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import zsched

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "README.md").read_text()
SECTION = TEXT.split("## From a Python application", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```python\n(.*?)```", SECTION, re.S)


def test_the_async_example_enqueues_through_async_app_and_a_typed_handle(
    redis_url, queue, tmp_path
) -> None:
    code = BLOCKS[0].replace("redis://127.0.0.1:6379/0", redis_url).replace('"shop"', f'"{queue}"')
    (tmp_path / "shop.py").write_text(code)
    subprocess.run([sys.executable, str(tmp_path / "shop.py")], check=True, timeout=60)
    app = zsched.App(redis_url, queue)
    assert app.get_run("receipt-42").state == "scheduled"
    assert app.status().delayed == 2
    app.close()


def test_the_testing_example_passes_under_pytest(tmp_path) -> None:
    app_code = BLOCKS[0].split("async def checkout")[0]  # the App, Order and the task
    (tmp_path / "test_shop.py").write_text(app_code + "\n" + BLOCKS[1])
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-W", "error", "test_shop.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr
