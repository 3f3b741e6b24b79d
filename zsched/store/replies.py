"""The argument and reply helpers the script wrappers share (zsched/store/scripts.py and
zsched/store/rule_scripts.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from zsched.errors import ScriptError


def now_arg(now_ms: int | None) -> str | int:
    """A script's now_ms argument: "" lets the script read the server's TIME."""
    return "" if now_ms is None else int(now_ms)


def int_list(reply: Any) -> list[int]:
    if not isinstance(reply, list):
        raise ScriptError(f"expected a list reply, got {reply!r}")
    return [int(x) for x in reply]


def flatten(groups: Iterable[Sequence[Any]]) -> list[Any]:
    out: list[Any] = []
    for g in groups:
        out.extend(g)
    return out
