"""The reference model stays independent of the code it checks (issue 18: "It must not import
the planner"): tests/model/rule_model.py, its slot enumerator slots.py and the completeness
check completeness.py import only the standard library and one another, read by ast (every
import statement, also inside a function or under TYPE_CHECKING, and relative ones), and
followed through the tests.model modules they import. A product trigger reaches the model
as data (slots.spec_of reads its attributes, calls none of its methods)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
#: The model's modules, and the only tests.model modules they may import.
MODEL = {"tests.model.rule_model", "tests.model.slots", "tests.model.completeness"}


def imports(source: str, module: str) -> list[str]:
    """Every module `source` (the text of `module`) imports, absolute names."""
    package = module.rsplit(".", 1)[0]
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                # `from tests.model import slots` imports the module tests.model.slots.
                full = f"{base}.{a.name}" if base else a.name
                out.append(full if full in MODEL or not base else base)
        elif isinstance(node, ast.Call) and _dynamic(node.func):
            out.append("<a dynamic import>")
    return out


def _dynamic(func: ast.expr) -> bool:
    """__import__(...) or importlib.import_module(...): an import ast cannot name."""
    if isinstance(func, ast.Name):
        return func.id == "__import__"
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def not_allowed(name: str) -> bool:
    if name in MODEL or name == "__future__":
        return False
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names or top == "importlib"


def bad_imports(module: str, seen: set[str] | None = None) -> list[str]:
    """`module`'s imports that are neither the standard library nor a model module, and
    those of the model modules it imports, as "module: name"."""
    seen = set() if seen is None else seen
    seen.add(module)
    path = HERE / (module.rsplit(".", 1)[1] + ".py")
    out = []
    for name in imports(path.read_text(), module):
        if not_allowed(name):
            out.append(f"{module}: {name}")
        elif name in MODEL and name not in seen:
            out += bad_imports(name, seen)
    return out


@pytest.mark.parametrize("module", sorted(MODEL))
def test_the_model_imports_nothing_of_zsched(module: str) -> None:
    assert bad_imports(module) == []


@pytest.mark.parametrize(
    "source",
    [
        "from zsched.rules.plan import plan",
        "import zsched.rules.triggers as t",
        "from zsched.dispatch import firer",
        "import croniter",
        "def f():\n    from zsched.rules import triggers\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zsched.rules.spec import Spec\n",
        "from ... import zsched",
        "from tests.model import real_system",
        "import importlib\nm = importlib.import_module('zsched.rules.plan')\n",
        "m = __import__('zsched')\n",
    ],
)  # fmt: skip
def test_the_import_check_sees_an_import_of_the_product(source: str) -> None:
    """The check can fail: each of these, in a model module, is refused."""
    assert any(not_allowed(n) for n in imports(source, "tests.model.rule_model")), source


def test_the_import_check_lets_the_model_import_its_own() -> None:
    ok = "from tests.model import slots as calendar\nfrom . import completeness\nimport zlib\n"
    assert [n for n in imports(ok, "tests.model.rule_model") if not_allowed(n)] == []
