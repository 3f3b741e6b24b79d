"""The package's layers (docs/architecture.md, "Layers"): no import circle and no upward import.

Every import counts: at the top of a module, inside functions, and under TYPE_CHECKING (a
type-only import still ties the two modules together for a reader and for mypy). The scan is
an AST walk of zsched/, so it needs no import of the package and sees code that never runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "zsched"

#: The layers, lowest first. A module may import its own layer and the layers below it.
#: A module's layer is that of the longest prefix listed here (a room, or a module).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("zsched.errors", "zsched._version", "zsched.config", "zsched.clock",
              "zsched.eventloop")),
    ("protocol", ("zsched.protocol",)),
    ("store", ("zsched.store",)),
    ("observability", ("zsched.observability",)),
    ("context", ("zsched.context",)),
    # The Celery rule builder is rule code (no Celery import): App.schedule(celery_task=) uses it.
    ("runs/rules", ("zsched.runs", "zsched.rules", "zsched.integrations.celery.rules")),
    ("dispatch/worker", ("zsched.dispatch", "zsched.worker")),
    (
        "facade",
        (
            "zsched.control_api",
            "zsched.schedule_api",
            "zsched.app_core",
            "zsched.app",
            "zsched.aio_reads",
            "zsched.aio_controls",
            "zsched.aio",
        ),
    ),  # fmt: skip
    (
        "apps",
        ("zsched", "zsched.testing", "zsched.integrations", "zsched.web", "zsched.demo"),
    ),
    ("cli", ("zsched.cli", "zsched.__main__")),
]

#: Imports that break the rules today, each removed by the work named beside it (issue #17).
#: The test fails when one of them is gone too, so this list only shrinks.
KNOWN: dict[tuple[str, str], str] = {}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement in the file).

    `import a.b` and `from a import b` (b a module) count as importing a.b; `from a import
    name` counts as importing a. A parent package that Python runs first is not counted: a
    package's `__init__` is its own module, with its own imports.
    """
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for m, p in files.items():
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            for target in _targets(node, package, files):
                if target in files and target != m:
                    graph[m].add(target)
    return graph


def _targets(node: ast.AST, package: str, modules: Mapping[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # a relative import, resolved against the importing module's package
        parts = package.split(".")
        head = parts[: len(parts) - node.level + 1]
        base = ".".join([*head, base] if base else head)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles: groups of modules that each reach all the others (the strongly
    connected components of more than one module), sorted."""
    reach = {m: reachable(graph, m) for m in graph}
    groups = {tuple(sorted({m} | {w for w in reach[m] if m in reach[w]})) for m in graph}
    return sorted(list(g) for g in groups if len(g) > 1)


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int:
    """The index in `layers` of the longest prefix of `module`; KeyError if none."""
    best, found = -1, None
    for i, (_name, prefixes) in enumerate(layers):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    if found is None:
        raise KeyError(module)
    return found


def upward(
    graph: Mapping[str, set[str]], layers: list[tuple[str, tuple[str, ...]]] = LAYERS
) -> list[tuple[str, str]]:
    """Imports of a module from a higher layer than its own."""
    return sorted(
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if layer_of(t, layers) > layer_of(m, layers)
    )


def _without(
    graph: Mapping[str, set[str]], edges: Iterable[tuple[str, str]]
) -> dict[str, set[str]]:
    drop = set(edges)
    return {m: {t for t in ts if (m, t) not in drop} for m, ts in graph.items()}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    missing = []
    for m in graph:
        try:
            layer_of(m)
        except KeyError:
            missing.append(m)
    assert not missing, f"add these modules' room to LAYERS (and docs/architecture.md): {missing}"


def test_the_package_has_no_import_circle(graph: dict[str, set[str]]) -> None:
    found = cycles(_without(graph, KNOWN))
    assert not found, f"import circles (every import counts, TYPE_CHECKING too): {found}"


def test_no_module_imports_a_higher_layer(graph: dict[str, set[str]]) -> None:
    bad = [e for e in upward(graph) if e not in KNOWN]
    assert not bad, f"upward imports (see the Layers table in docs/architecture.md): {bad}"


def test_every_known_exception_still_exists(graph: dict[str, set[str]]) -> None:
    gone = [e for e in KNOWN if e[1] not in graph.get(e[0], set())]
    assert not gone, f"fixed: remove these from KNOWN, so they cannot come back: {gone}"
    # ... and is still an exception: an upward import, or an edge of a circle.
    up, circles = set(upward(graph)), cycles(graph)
    fine = [e for e in KNOWN if e not in up and not any(set(e) <= set(c) for c in circles)]
    assert not fine, f"no longer break a rule: remove these from KNOWN: {fine}"


def test_the_layer_table_matches_the_doc() -> None:
    doc = (ROOT.parent / "docs" / "architecture.md").read_text()
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    for name, prefixes in LAYERS:
        assert f"| {name} |" in section, name
        for p in prefixes:
            assert f"`{p}`" in section, p


# -- the scanner itself -------------------------------------------------------------------------


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        p = tmp_path / "zsched" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return import_graph(tmp_path / "zsched")


def test_the_scanner_sees_a_circle_made_of_function_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    graph = _plant(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "",
        "store/a.py": "def f():\n    from zsched.runs import b\n",
        "runs/__init__.py": "",
        "runs/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from zsched.store.a import f\n",
    })  # fmt: skip
    assert cycles(graph) == [["zsched.runs.b", "zsched.store.a"]]
    assert upward(graph) == [("zsched.store.a", "zsched.runs.b")]


def test_the_scanner_resolves_relative_imports_and_finds_a_longer_circle(tmp_path: Path) -> None:
    graph = _plant(tmp_path, {
        "__init__.py": "",
        "rules/__init__.py": "",
        "rules/x.py": "from . import y\n",
        "rules/y.py": "from .z import thing\n",
        "rules/z.py": "import zsched.rules.x\nthing = 1\n",
    })  # fmt: skip
    assert cycles(graph) == [["zsched.rules.x", "zsched.rules.y", "zsched.rules.z"]]
    assert upward(graph) == []


def test_a_clean_planted_tree_passes(tmp_path: Path) -> None:
    graph = _plant(tmp_path, {
        "__init__.py": "from zsched.app import App\n",
        "app.py": "from zsched.store import s\nclass App: ...\n",
        "store/__init__.py": "",
        "store/s.py": "import zsched.errors\n",
        "errors.py": "",
    })  # fmt: skip
    assert cycles(graph) == [] and upward(graph) == []
