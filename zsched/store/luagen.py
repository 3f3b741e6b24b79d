"""Copy lua/lib/*.lua into the scripts that use them: `python -m zsched.store.luagen [--check]`.

Every client loads the plain .lua files of lua/ unchanged (Python, Node.js, redis-cli), and a
Redis script cannot load another, so a shared block (the delayed set's B-tree) is copied into
each script between its `-- BEGIN <name>` and `-- END <name>` lines. tests/unit keeps the
copies equal to lua/lib/<name>.lua.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from zsched.store.scripts import lua_dir

_BLOCK = re.compile(r"^-- BEGIN (\w+)\b.*?^-- END \1\n", re.S | re.M)


def expand(text: str, lib: Path) -> str:
    """`text` with each shared block replaced by the current lua/lib/<name>.lua."""

    def sub(m: re.Match[str]) -> str:
        return (lib / f"{m.group(1)}.lua").read_text(encoding="utf-8")

    return _BLOCK.sub(sub, text)


def stale(root: Path | None = None) -> list[Path]:
    """Scripts whose shared blocks differ from lua/lib."""
    root = root or lua_dir()
    paths = sorted(root.glob("*.lua"))
    return [p for p in paths if expand(p.read_text("utf-8"), root / "lib") != p.read_text("utf-8")]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = lua_dir()
    paths = stale(root)
    if "--check" in args:
        for p in paths:
            print(f"{p}: shared block differs from lua/lib (run `make lua`)", file=sys.stderr)
        return 1 if paths else 0
    for p in paths:
        p.write_text(expand(p.read_text("utf-8"), root / "lib"), encoding="utf-8")
        print(f"updated {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
