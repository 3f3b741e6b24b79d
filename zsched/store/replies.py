"""The argument and reply helpers the script wrappers share (zsched/store/scripts.py and
zsched/store/rule_scripts.py), and the due tag of a value in `runs`, which enqueue's arguments
carry and the delayed set's readers (zsched/store/delayed.py) take apart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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


TAG_BYTES = 7


def tag(due_ms: int, envelope: bytes) -> bytes:
    """The value of a run due at `due_ms` in `runs`: 0x00, the due in 6 bytes big-endian, the
    envelope (docs/protocol.md, "The delayed set")."""
    return b"\0" + int(due_ms).to_bytes(6, "big") + envelope


def untag(value: bytes) -> tuple[int | None, bytes]:
    """(due_ms, envelope) of a value of `runs`; due_ms is None for an untagged value (written
    before key layout 3, or by hand)."""
    if value[:1] == b"\0" and len(value) >= TAG_BYTES:
        return int.from_bytes(value[1:TAG_BYTES], "big"), value[TAG_BYTES:]
    return None, value


def dead_envelope(fields: Mapping[bytes, bytes]) -> bytes:
    """The envelope of a dead letter's fields. A worker of zsched 0.3, which reads only the
    first shape of a ready entry, dead-letters an entry of the second as undecodable with its
    bytes whole, due tag and all: the tag is taken off here, so the letter reads, and
    replays, like any other."""
    return untag(fields.get(b"envelope") or b"")[1]


def entry_payload(fields: Mapping[bytes, bytes]) -> tuple[bytes, int | None]:
    """(envelope, due_ms) of the fields of an entry of the ready stream, in either shape
    dispatch.lua writes (docs/protocol.md, "Keys"): plain, `run_id`, `envelope`, `due_ms`; or
    tagged, `run_id` and `envelope` holding the run's value of `runs` as it was: its due tag,
    then the envelope (told by its first byte, 0x00, which no envelope starts with). Tagged
    costs Redis ~5 k fewer instructions a run (BENCHMARKS.md, "Session 24"); a reader that
    knows only plain (zsched 0.3) dead-letters a tagged entry whole (zsched/runs/entry_shape.py)."""
    due, env = untag(fields.get(b"envelope", b""))
    if due is not None:
        return env, due
    text = fields.get(b"due_ms")
    return env, int(text) if text and text.isdigit() else None
