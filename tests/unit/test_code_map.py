"""docs/architecture.md stays true: the folder map, the code map of the Lua scripts, the checklist.

The code map is a markdown table with one row per lua/*.lua; its cells name files, and
functions as `path.py::Qual.name`. These tests parse it and check it against the tree: every
script has a row, every named file and function exists, every function in zsched/ that calls
a wrapper is named, every `stats` field a script counts and every metric a row names is real.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from zsched.observability.collector import COLLECTED_COUNTERS, COLLECTED_METRICS
from zsched.observability.metrics import Metrics
from zsched.store import scripts as S

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
LUA = ROOT / "lua"
SCRIPTS = sorted(p.stem for p in LUA.glob("*.lua"))
#: Former names of scripts, kept as files for clients (scripts.py's ALIASES: old -> new name).
ALIASES: dict[str, str] = dict(getattr(S, "ALIASES", {}))
REF = re.compile(r"`([\w./-]+\.py)::([\w.]+)`")
FILE = re.compile(r"`((?:zsched|tests|docs|lua)/[\w./-]*?)(?:#([\w-]+))?`")
#: Glossary words the style guide asks for (shared/STYLE.md) and issue 17.
GLOSSARY = ("run", "task", "rule", "schedule id", "trigger", "slot", "fire", "dispatch", "hold",
            "overlap lease", "ledger outcome", "partition", "dead letter", "dedupe window")  # fmt: skip


# -- reading the doc ---------------------------------------------------------------------------


@cache
def doc_section(title: str, level: str = "##") -> str:
    """The text under the heading that starts with `title`, up to the next heading of its level."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^{level} {re.escape(title)}.*?$(.*?)(?=^{level} |\Z)", text, re.M | re.S)
    assert m, f"docs/architecture.md has no section {level} {title}"
    return m.group(1)


def table(text: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell (backticks stripped); header row left out."""
    rows: dict[str, list[str]] = {}
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def code_map() -> dict[str, list[str]]:
    """script -> [script, wrapper, called by, metrics, tests, docs]."""
    return table(doc_section("Code map"))


def folder_map() -> dict[str, list[str]]:
    return table(doc_section("The folder map"))


# -- reading the code --------------------------------------------------------------------------


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every def and class, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = prefix + node.name
            yield name, node
            yield from functions(node, name + ".")
        else:
            yield from functions(node, prefix)


def defines(path: Path, qualname: str) -> bool:
    return any(name == qualname for name, _ in functions(parsed(path)))


@cache
def wrappers() -> dict[tuple[str, str], str]:
    """(module, function) -> script, from the wrapper cells."""
    out = {}
    for script, cells in code_map().items():
        for path, func in REF.findall(cells[1]):
            out[(module_name(ROOT / path), func)] = script
    # A wrapper re-exported (`from M import f as f`, as scripts.py does for rule_scripts.py's)
    # is the same wrapper under the re-exporting module's name.
    for path in sorted((ROOT / "zsched").rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if a.asname == a.name and (node.module, a.name) in out:
                        out[(module_name(path), a.name)] = out[(node.module, a.name)]
    return out


def import_aliases(tree: ast.Module, wrapped: dict[tuple[str, str], str]) -> dict[str, object]:
    """Local name -> a wrapper module (str) or a wrapper (tuple), from every import in `tree`."""
    modules = {m for m, _ in wrapped}
    aliases: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                local = a.asname or a.name
                if full in modules:
                    aliases[local] = full
                elif (node.module, a.name) in wrapped:
                    aliases[local] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    aliases[a.asname or a.name] = a.name
    return aliases


def called_wrapper(call: ast.Call, aliases: dict[str, object], module: str) -> tuple[str, str]:
    """The (module, function) a call names, resolved through the imports ('' if none)."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        target = aliases.get(f.value.id)
        return (target, f.attr) if isinstance(target, str) else ("", "")
    if isinstance(f, ast.Name):
        target = aliases.get(f.id, (module, f.id))
        return target if isinstance(target, tuple) else ("", "")  # type: ignore[return-value]
    return ("", "")


def calls_by_function(
    tree: ast.AST, prefix: str = "", owner: str = ""
) -> Iterator[tuple[str, ast.Call]]:
    """(qualified name of the innermost def or class around it, call) of every call in `tree`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from calls_by_function(node, prefix + node.name + ".", prefix + node.name)
            continue
        if isinstance(node, ast.Call):
            yield owner, node
        yield from calls_by_function(node, prefix, owner)


def call_sites(path: Path) -> set[tuple[str, str]]:
    """(script, "path::Qual.name") of every call of a wrapper inside a function of `path`."""
    wrapped = wrappers()
    tree = parsed(path)
    aliases = import_aliases(tree, wrapped)
    module, rel = module_name(path), path.relative_to(ROOT).as_posix()
    found = set()
    for qualname, call in calls_by_function(tree):
        script = wrapped.get(called_wrapper(call, aliases, module))
        if script and qualname:
            found.add((script, f"{rel}::{qualname}"))
    return found


# -- the code map ------------------------------------------------------------------------------


def test_every_lua_script_has_a_row() -> None:
    rows = code_map()
    assert sorted(set(rows) - {"lib/"}) == SCRIPTS
    assert ("lib/" in rows) == (LUA / "lib").is_dir()


def test_every_lua_file_is_a_registered_script() -> None:
    """A script Scripts does not register cannot be called (NAMES is its list); a former
    name (ALIASES) is a file for other clients, of a script in NAMES."""
    assert sorted(set(S.NAMES) | set(ALIASES)) == SCRIPTS
    assert set(ALIASES.values()) <= set(S.NAMES) and not set(ALIASES) & set(S.NAMES)


def test_the_row_of_a_former_name_names_the_script_it_stands_for() -> None:
    for alias, name in ALIASES.items():
        cells = code_map()[alias]
        assert not REF.findall(cells[1] + cells[2]), f"{alias}: no wrapper, no caller of its own"
        assert f"`{name}`" in cells[1], f"{alias}: the wrapper cell names {name}"


@pytest.mark.parametrize("script", sorted(S.NAMES))
def test_the_wrapper_builds_the_call_of_its_script(script: str) -> None:
    refs = REF.findall(code_map()[script][1])
    assert len(refs) == 1, f"{script}: the wrapper cell names one `path.py::function`"
    path, func = refs[0]
    [node] = [n for n in parsed(ROOT / path).body if getattr(n, "name", None) == func]
    names = [c.args[0].value for c in ast.walk(node) if isinstance(c, ast.Call)
             and getattr(c.func, "id", "") == "Call" and c.args
             and isinstance(c.args[0], ast.Constant)]  # fmt: skip
    assert names == [script], f"{path}::{func} builds {names}, not Call({script!r}, ...)"


def test_reply_codes_are_named_in_protocol_replies() -> None:
    """One IntEnum per family of reply codes, all in one module (BullMQ's reply-code enum)."""
    home = ROOT / "zsched" / "protocol" / "replies.py"
    elsewhere = [f"{path.relative_to(ROOT)}::{node.name}"
                 for path in sorted((ROOT / "zsched").rglob("*.py")) if path != home
                 for node in ast.walk(parsed(path)) if isinstance(node, ast.ClassDef)
                 and any(ast.unparse(b).endswith("IntEnum") for b in node.bases)]  # fmt: skip
    assert not elsewhere, f"reply-code enums outside protocol/replies.py: {elsewhere}"
    assert any(isinstance(n, ast.ClassDef) for n in parsed(home).body)


def test_named_files_and_functions_exist() -> None:
    cells = [c for row in code_map().values() for c in row[1:]]
    cells += [c for row in folder_map().values() for c in row[:1]]
    for cell in cells:
        for path, qualname in REF.findall(cell):
            assert (ROOT / path).is_file(), f"{path} does not exist"
            assert defines(ROOT / path, qualname), f"{path} defines no {qualname}"
        for path, _anchor in FILE.findall(cell):
            assert (ROOT / path).exists(), f"{path} does not exist"


def all_call_sites() -> dict[str, set[str]]:
    """script -> every "path::Qual.name" in zsched/ that calls its wrapper."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "zsched").rglob("*.py")):
        for script, site in call_sites(path):
            found.setdefault(script, set()).add(site)
    return found


def test_every_call_site_of_a_wrapper_is_in_its_row() -> None:
    rows = code_map()
    missing = [f"{script}: {site}" for script, sites in sorted(all_call_sites().items())
               for site in sorted(sites) if f"`{site}`" not in rows[script][2]]  # fmt: skip
    assert not missing, "name these callers in the code map's 'called by' cells: " + str(missing)


def test_every_caller_a_row_names_calls_its_wrapper() -> None:
    """The other way round (and so the call finder is seen to work for every caller named)."""
    found = all_call_sites()
    for script, cells in code_map().items():
        named = {f"{path}::{qualname}" for path, qualname in REF.findall(cells[2])}
        wrong = named - found.get(script, set())
        assert not wrong, f"{script}: {sorted(wrong)} do not call its wrapper"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_stats_field_a_script_counts_is_in_its_row(script: str) -> None:
    source = (LUA / f"{script}.lua").read_text(encoding="utf-8")
    counted = set(re.findall(r"HINCRBY', stats, '([^']+)'\s*[,)]", source))
    missing = {f for f in counted if f"`{f}`" not in code_map()[script][3]}
    assert not missing, f"{script}.lua counts {sorted(missing)} in stats; name them in its row"


def exposed_metric_names() -> set[str]:
    names = set(COLLECTED_METRICS) | set(COLLECTED_COUNTERS)
    for family in Metrics().registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_every_metric_a_row_names_exists() -> None:
    known = exposed_metric_names()
    for script, cells in code_map().items():
        named = set(re.findall(r"\bzsched_[a-z0-9_]+", cells[3]))
        assert named <= known, f"{script}: no metric named {sorted(named - known)}"


@cache
def github_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file."""
    anchors = set()
    for title in re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_doc_section_a_row_names_exists() -> None:
    for script, cells in code_map().items():
        for path, anchor in FILE.findall(cells[5]):
            assert anchor, f"{script}: name a section, {path}#..."
            assert anchor in github_anchors(ROOT / path), f"{script}: {path} has no #{anchor}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_a_protocol_section(script: str) -> None:
    """docs/protocol.md is enough to write a client: every script has its section."""
    assert f"`docs/protocol.md#{script}lua`" in code_map()[script][5]
    assert f"{script}lua" in github_anchors(ROOT / "docs" / "protocol.md")


def test_every_row_names_a_test_that_mentions_its_script() -> None:
    for script, cells in code_map().items():
        files = [ROOT / p for p, _ in FILE.findall(cells[4])]
        assert files, f"{script}: the row names no test"
        # A former name's file is tested through ALIASES (the same script as its new name).
        word = re.compile(rf"\b({re.escape(script.rstrip('/'))}|ALIASES)\b")
        assert any(word.search(f.read_text(encoding="utf-8")) for f in files), script


# -- the checklist -----------------------------------------------------------------------------


def test_checklist_names_tests_that_exist() -> None:
    named = REF.findall(doc_section("Adding a script", "###"))
    assert len(named) >= 10
    for path, test in named:
        assert path.startswith("tests/") and test.startswith("test_"), f"{path}::{test}"
        assert defines(ROOT / path, test), f"{path} has no {test}"


def script_tests_gaps() -> set[str]:
    """The scripts the checklist says have no tests/scripts file yet."""
    m = re.search(
        r"Scripts without one yet[^:]*:([\w,\s]+)\.", doc_section("Adding a script", "###")
    )
    assert m, "the checklist lists the scripts without a tests/scripts file"
    return {w.strip() for w in m.group(1).split(",")}


def test_every_new_script_is_called_by_a_script_test() -> None:
    called = set()
    for path in (ROOT / "tests" / "scripts").glob("*.py"):
        called |= {script for script, _ in call_sites(path)}
        called |= set(re.findall(r"source\(\"(\w+)\"\)", path.read_text(encoding="utf-8")))
    untested = set(SCRIPTS) - called
    assert untested <= script_tests_gaps(), f"no test in tests/scripts calls {untested}"
    assert not (script_tests_gaps() & called), "a script test exists now: shorten the list"


def test_the_script_tests_run_on_valkey() -> None:
    valkey = (ROOT / "mk" / "valkey.mk").read_text(encoding="utf-8")
    m = re.search(r"^VALKEY_TESTS \?=(.*?)(?:\n\n|\n[^ \t])", valkey, re.M | re.S)
    assert m and "tests/scripts " in m.group(1) + " "


# -- the folder map and the glossary -----------------------------------------------------------


def test_every_room_and_top_level_module_is_in_the_folder_map() -> None:
    rows = set(folder_map())
    pkg = ROOT / "zsched"
    rooms = {f"zsched/{d.name}/" for d in pkg.iterdir() if (d / "__init__.py").is_file()}
    modules = {f"zsched/{p.name}" for p in pkg.glob("*.py")}
    assert rooms | modules <= rows, f"add to the folder map: {sorted((rooms | modules) - rows)}"
    for row in rows:
        assert (ROOT / row).exists(), f"the folder map names {row}, which does not exist"


def test_a_room_that_lists_its_modules_lists_them_all() -> None:
    for room, cells in folder_map().items():
        listed = set(re.findall(r"`(\w+\.py)`", cells[1]))
        if room.endswith("/") and listed:
            present = {p.name for p in (ROOT / room).glob("*.py")} - {"__init__.py"}
            assert listed == present, f"{room}: listed {sorted(listed)}, present {sorted(present)}"


def test_the_glossary_defines_each_word_once() -> None:
    terms = re.findall(r"^- \*\*([^*]+)\*\*:", doc_section("Glossary"), re.M)
    assert len(terms) == len(set(terms))
    assert set(GLOSSARY) <= set(terms), f"define {sorted(set(GLOSSARY) - set(terms))}"


# -- layout named anywhere in the docs ---------------------------------------------------------

#: Paths the docs name that are not in the tree on purpose: made by `make`, or the wheel's layout.
NOT_IN_TREE = {"bench/peers/.venv", "bench/peers/node_modules", "zsched/lua"}


def _generated(path: str) -> bool:
    """A path made by `make` (a venv, node_modules), or under one, is not in a clean clone."""
    return any(path == top or path.startswith(top + "/") for top in NOT_IN_TREE)


def test_every_path_the_docs_name_exists() -> None:
    """A module, test or example moved or renamed leaves no stale path in README, docs/ or
    BENCHMARKS.md."""
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
    path = re.compile(r"(?<![\w/.-])((?:zsched|tests|lua|bench|examples|mk)/[\w/.-]*\w)")
    stale = [f"{doc.name}: {p}" for doc in docs for p in sorted(set(path.findall(doc.read_text())))
             if not _generated(p) and not (ROOT / p).exists()]  # fmt: skip
    assert not stale, f"paths that do not exist: {stale}"
