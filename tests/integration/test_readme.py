"""The README's quick start stays true: its code runs against a real redis-server."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quickstart_code() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- quickstart -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md lost its quick start block"
    return m.group(1)


def test_readme_names_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text


async def test_quickstart_code_runs(redis_url, queue, tmp_path, capsys) -> None:
    code = quickstart_code()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    code = code.replace("redis://127.0.0.1:6379/0", redis_url).replace('"reminders"', f'"{queue}"')
    path = tmp_path / "myapp.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("myapp", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["myapp"] = mod
    spec.loader.exec_module(mod)
    app = mod.app
    from zsched import FakeClock

    app.clock = FakeClock(app.redis.time()[0] * 1000)
    rid = app.enqueue("send_reminder", {"learner": "ada"}, delay=5, run_id="python-101:ada")
    assert not rid.duplicate
    assert app.enqueue("send_reminder", {"learner": "ada"}, delay=5, run_id=rid).duplicate
    d, w = app.dispatcher(), app.worker()
    app.clock.advance(5000)
    await d.tick()
    assert await w.tick() == 1
    assert "reminding ada (python-101:ada, attempt 1)" in capsys.readouterr().out
    await d.close()
    await w.close()
    del sys.modules["myapp"]
