"""`zsched lua-dir`: where the installed .lua files are, for clients in other languages."""

from __future__ import annotations

import argparse
from typing import Any

from zsched.store.scripts import lua_dir


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lua-dir",
        help="print the folder of the installed Lua scripts (for ZSCHED_LUA_DIR)",
        description="Print the folder holding zsched's Lua scripts, as installed with the "
        "package. The Node.js and shell clients load them from $ZSCHED_LUA_DIR: "
        'export ZSCHED_LUA_DIR="$(zsched lua-dir)".',
    )
    p.set_defaults(func=cmd_lua_dir)


def cmd_lua_dir(args: argparse.Namespace) -> int:
    print(lua_dir())
    return 0
