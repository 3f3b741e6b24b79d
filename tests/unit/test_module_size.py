"""Modules stay under 400 lines (STYLE.md, issue #17): a longer one is split by concept.

KNOWN lists the modules over the limit today, each with the split that removes it. The test
fails when a module not listed grows past the limit, and when a listed one is back under it
(remove it then, so it cannot grow back): the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "zsched"
LIMIT = 400

#: Module (path under zsched/) -> the work that brings it under the limit.
KNOWN: dict[str, str] = {
    "store/scripts.py": "split the wrappers by room (worker's, rules', runs' scripts)",
}


def lines_of() -> dict[str, int]:
    return {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
        for p in sorted(ROOT.rglob("*.py"))
    }


def test_no_module_is_over_the_limit() -> None:
    over = {m: n for m, n in lines_of().items() if n > LIMIT and m not in KNOWN}
    assert not over, f"modules over {LIMIT} lines (split them by concept): {over}"


def test_every_known_long_module_is_still_long() -> None:
    sizes = lines_of()
    fixed = [m for m in KNOWN if sizes.get(m, 0) <= LIMIT]
    assert not fixed, f"under {LIMIT} lines now: remove these from KNOWN: {fixed}"
