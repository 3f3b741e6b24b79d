"""No pickle, no eval, no import of anything a run names: a worker runs registered tasks only."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import zsched

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*(ROOT / "zsched").rglob("*.py"), *(ROOT / "lua").glob("*.lua")]
_NAMES = r"(c?pickle|_pickle|cloudpickle|dill|marshal|shelve|jsonpickle)"
# Used, not mentioned: `import pickle`, `from pickle import ...`, `pickle.loads(...)`.
SERIALISERS = re.compile(rf"\b(import|from)\s+{_NAMES}\b|\b{_NAMES}\.\w")
# The builtins, not methods such as a pipeline's `.eval(` (which sends Redis EVAL).
BUILTINS = re.compile(r"(?<![\w.])(eval|exec|compile|__import__)\s*\(")


def test_no_pickle_or_other_code_carrying_serialiser_anywhere() -> None:
    assert len(SOURCES) > 20
    hits = [f"{p.relative_to(ROOT)}: {m[0]}" for p in SOURCES
            for m in SERIALISERS.finditer(p.read_text())]  # fmt: skip
    assert hits == []


def test_no_eval_exec_or_dynamic_import_of_data() -> None:
    hits = [f"{p.relative_to(ROOT)}: {m[0]}" for p in SOURCES if p.suffix == ".py"
            for m in BUILTINS.finditer(p.read_text())]  # fmt: skip
    assert hits == []
    # The dynamic imports, all of names an operator gives, never of a run's data: the
    # MODULE:APP passed to `zsched worker` and `zsched celery-bridge`, and the task modules of
    # a Django project (its INSTALLED_APPS and settings).
    importers = sorted(str(p.relative_to(ROOT)) for p in SOURCES
                       if "import_module" in p.read_text())  # fmt: skip
    assert importers == ["zsched/cli/celery_bridge.py", "zsched/cli/processes.py",
                         "zsched/integrations/django/registry.py"]  # fmt: skip


def test_the_guard_patterns_would_catch_an_offender() -> None:
    assert SERIALISERS.search("import pickle") and SERIALISERS.search("x = pickle.loads(raw)")
    assert SERIALISERS.search("from marshal import loads")
    assert not SERIALISERS.search("msgpack, never pickle.")
    assert BUILTINS.search("x = eval(payload)") and not BUILTINS.search("pipe.eval(SCRIPT, 1)")


async def test_a_run_naming_a_module_or_builtin_is_dead_lettered_without_importing_it(
    backend, queue, tmp_path: Path
) -> None:
    app = backend.app(queue)
    ran = []

    @app.task(name="registered")
    async def registered(payload: object) -> None:
        ran.append(payload)

    marker = tmp_path / "pwned"
    names = ["antigravity:fly", "this", "turtle.done", "os.system", "subprocess:call",
             "builtins.eval", "__import__", "zsched.worker.worker:Worker"]  # fmt: skip
    for i, name in enumerate(names):
        app.enqueue(name, f"touch {marker}", run_id=f"evil-{i}")
    app.enqueue("registered", {"__reduce__": ["os.system", ["touch", str(marker)]]}, run_id="ok")
    before = set(sys.modules)
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    reasons = {dl.run_id: dl.reason for dl in app.dead_letters()}
    assert set(reasons) == {f"evil-{i}" for i in range(len(names))}
    assert all(r.startswith("unknown task") for r in reasons.values())
    # The payload reached the registered task as plain data, nothing more.
    assert ran == [{"__reduce__": ["os.system", ["touch", str(marker)]]}]
    assert not marker.exists()
    assert not {"antigravity", "this", "turtle"} & (set(sys.modules) - before)
    await d.close()
    await w.close()
    assert isinstance(zsched.App, type)
