"""docs/architecture.md "Moved modules" stays true: each old module path is gone, each new one
imports, and each old deep import named there fails while its replacement works."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
SECTION = DOC.read_text().split("## Moved modules", 1)[1].split("\n## ", 1)[0]
MODULE_ROWS = re.findall(r"^\| `(zsched[\w.]*)` \| `(zsched[\w.]*)`", SECTION, re.M)
IMPORT_ROWS = re.findall(
    r"^\| `from (zsched[\w.]*) import (\w+)`.*?\| `from (zsched[\w.]*) import (\w+)`",
    SECTION,
    re.M,
)


def test_the_section_lists_modules_and_imports() -> None:
    assert len(MODULE_ROWS) >= 40 and len(IMPORT_ROWS) >= 5


@pytest.mark.parametrize(("old", "new"), MODULE_ROWS, ids=[o for o, _ in MODULE_ROWS])
def test_an_old_module_is_gone_and_its_new_home_imports(old: str, new: str) -> None:
    assert importlib.util.find_spec(old) is None, f"{old} exists again: update the doc"
    importlib.import_module(new)


@pytest.mark.parametrize(
    ("old", "old_name", "new", "new_name"), IMPORT_ROWS, ids=[f"{r[0]}.{r[1]}" for r in IMPORT_ROWS]
)
def test_an_old_deep_import_fails_and_its_replacement_works(
    old: str, old_name: str, new: str, new_name: str
) -> None:
    assert not hasattr(importlib.import_module(old), old_name), f"{old}.{old_name} works again"
    assert hasattr(importlib.import_module(new), new_name)
