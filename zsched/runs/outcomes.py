"""Outcome details of finished runs (tasks registered with keep_result=True): attempts, the
last attempt's duration and the handler's return value, msgpack-encoded and capped in size,
kept in Redis for the dedupe window (lua/record.lua) and read by `get_run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from zsched.errors import ScriptError
from zsched.protocol.keys import QueueKeys
from zsched.store.replies import now_arg as _now
from zsched.store.scripts import Call


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished run left: attempts, its last attempt's duration, its return value (or
    why it was not kept: over the size cap, not msgpack-encodable)."""

    attempts: int
    duration_ms: int
    result: Any = None
    result_error: str | None = None

    def encode(self) -> bytes:
        fields = [1, self.attempts, self.duration_ms, self.result, self.result_error]
        return msgpack.packb(fields, use_bin_type=True)  # type: ignore[no-any-return]


def build(attempts: int, duration_s: float, value: Any, max_bytes: int) -> Outcome:
    """The outcome of a run whose handler returned `value`; a value that cannot be kept is
    replaced by a clear error naming why."""
    duration_ms = max(0, int(duration_s * 1000))
    if value is None:
        return Outcome(attempts, duration_ms)
    try:
        size = len(msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError) as exc:
        why = f"return value of type {type(value).__name__} is not msgpack-encodable: {exc}"
        return Outcome(attempts, duration_ms, None, why[:500])
    if size > max_bytes:
        why = (
            f"return value is {size} bytes encoded, over the cap of {max_bytes} (max_result_bytes)"
        )
        return Outcome(attempts, duration_ms, None, why)
    return Outcome(attempts, duration_ms, value)


def decode(raw: bytes) -> Outcome | None:
    """An outcome as record.lua keeps it; None for one this version cannot read."""
    try:
        v = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        return None
    if not (isinstance(v, list) and len(v) >= 5 and v[0] == 1):
        return None
    return Outcome(int(v[1]), int(v[2]), v[3], v[4])


def record(
    k: QueueKeys,
    pairs: list[tuple[str, bytes]],
    *,
    now_ms: int | None,
    dedupe_window_ms: int,
    trim_limit: int = 200,
) -> Call[int]:
    """Keep outcomes (run_id, encoded Outcome). Reply: how many were recorded."""

    def decode_reply(reply: Any) -> int:
        if not isinstance(reply, int):
            raise ScriptError(f"record: expected a count, got {reply!r}")
        return reply

    return Call(
        "record",
        [k.outcomes, k.outcome_times],
        [_now(now_ms), dedupe_window_ms, trim_limit, *[x for p in pairs for x in p]],
        decode_reply,
    )
