"""Copy lua/lib/*.lua into the scripts that use them: `python -m zsched.store.luagen [--check]`.

Every client loads the plain .lua files of lua/ unchanged (Python, Node.js, redis-cli), and a
Redis script cannot load another, so a shared block (the delayed set's B-tree) is copied into
each script between its `-- BEGIN <name>` and `-- END <name>` lines. tests/unit keeps the
copies equal to lua/lib/<name>.lua.

A script gets only the functions of the block it calls, directly or through another one:
every call of a script runs its whole top level, and each `local function` there makes a
closure (~600 instructions each, ~12 k for the whole B-tree block on every call).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from zsched.store.scripts import lua_dir

_BLOCK = re.compile(r"^-- BEGIN (\w+)\b.*?^-- END \1\n", re.S | re.M)
_FUNCTION = re.compile(r"^local function (\w+)")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _code(text: str) -> str:
    """`text` without its comments (the names in them are no calls)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _chunks(lib: str) -> list[tuple[str | None, str]]:
    """The block's top-level statements, each with the comment lines before it, as
    (function name or None, text). The first (the BEGIN line and what follows it up to the
    first statement) and the END line are chunks of their own."""
    out: list[tuple[str | None, str]] = []
    lines = lib.splitlines(keepends=True)
    cur: list[str] = []
    name: str | None = None
    open_body = False
    for line in lines:
        top = not line[:1].isspace()
        starts = top and (line.startswith(("local ", "-- END")) or line.startswith("--"))
        if starts and not open_body and any(not x.startswith("--") for x in cur):
            out.append((name, "".join(cur)))
            cur, name = [], None
        cur.append(line)
        m = _FUNCTION.match(line)
        if m:
            name = m.group(1)
            open_body = not line.rstrip().endswith(" end")
        elif top and line.rstrip() == "end":
            open_body = False
    out.append((name, "".join(cur)))
    return out


def _subset(lib: str, script_code: str) -> str:
    """The block with only the functions `script_code` calls, directly or indirectly."""
    chunks = _chunks(lib)
    defined = {n for n, _ in chunks if n}
    uses = {n: set(_NAME.findall(_code(t))) & defined - {n} for n, t in chunks if n}
    want = set(_NAME.findall(script_code)) & defined
    todo = list(want)
    while todo:
        for dep in uses[todo.pop()] - want:
            want.add(dep)
            todo.append(dep)
    return "".join(t for n, t in chunks if n is None or n in want)


def expand(text: str, lib: Path) -> str:
    """`text` with each shared block replaced by the current lua/lib/<name>.lua, cut to the
    functions the rest of `text` calls, or another block it has calls (the lease block calls
    the btree block's functions): repeated until no block grows."""
    own = _code(_BLOCK.sub("", text))
    names = [m.group(1) for m in _BLOCK.finditer(text)]
    libs = {n: (lib / f"{n}.lua").read_text(encoding="utf-8") for n in names}
    subsets = dict.fromkeys(names, "")
    while True:
        rest = own + "".join(_code(t) for t in subsets.values())
        grown = {n: _subset(libs[n], rest) for n in names}
        if grown == subsets:
            break
        subsets = grown
    return _BLOCK.sub(lambda m: subsets[m.group(1)], text)


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
