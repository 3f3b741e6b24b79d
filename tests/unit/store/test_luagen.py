"""luagen: a script carries only the functions of a shared block that it calls."""

from __future__ import annotations

from zsched.store.luagen import expand
from zsched.store.scripts import lua_dir

_HEAD = """-- BEGIN btree
-- END btree
return bt_head(KEYS[1]) -- bt_add is named in a comment only
"""


def test_a_script_gets_the_functions_it_calls_and_what_they_call() -> None:
    out = expand(_HEAD, lua_dir() / "lib")
    assert "local function bt_head(" in out and "local function bt_num(" in out
    assert "local function bt_add(" not in out and "local function bt_take(" not in out
    assert out.startswith("-- BEGIN btree") and "-- END btree\nreturn bt_head" in out


def test_the_functions_keep_their_comments_and_order() -> None:
    lib = (lua_dir() / "lib" / "btree.lua").read_text("utf-8")
    out = expand(
        "-- BEGIN btree\n-- END btree\nbt_add(KEYS[1], {}, {}, false)\n", lua_dir() / "lib"
    )
    names = ["bt_key", "bt_num", "bt_bound", "bt_less", "bt_before", "bt_add"]
    assert [out.index(f"local function {n}(") for n in names] == sorted(
        out.index(f"local function {n}(") for n in names
    )
    start = lib.index("-- Add runs: ids[j] due at")
    assert lib[start : lib.index("-- Remove one run")] in out
