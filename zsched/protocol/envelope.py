"""The versioned run envelope: what a run carries through Redis.

msgpack on the wire (JSON accepted from hand-written clients: an envelope whose first byte is
`{` is JSON). Never pickle. docs/protocol.md documents every field for other languages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, NewType, cast

import msgpack

from zsched.errors import PayloadError
from zsched.protocol.limits import DEFAULT_MAX_PAYLOAD_BYTES as DEFAULT_MAX_PAYLOAD_BYTES
from zsched.protocol.limits import MAX_INSTANT_MS as MAX_INSTANT_MS
from zsched.protocol.limits import MAX_RUN_ID_BYTES as MAX_RUN_ID_BYTES
from zsched.protocol.limits import MAX_TASK_BYTES as MAX_TASK_BYTES

RunId = NewType("RunId", str)
ScheduleId = NewType("ScheduleId", str)
QueueName = NewType("QueueName", str)
#: User data carried by a run: anything msgpack can encode (None, bool, int, float, str,
#: bytes, lists and dicts of those).
Payload = Any

#: Major protocol version this code writes: 2, the positional msgpack array. It reads 2 and 1
#: (the map, in msgpack or JSON, that hand-written clients may still write). Other majors are
#: dead-lettered.
VERSION = 2
READS = (1, 2)


@dataclass(frozen=True, slots=True)
class Envelope:
    """One run as it travels through Redis."""

    run_id: str
    task: str
    payload: Payload
    #: When this attempt is due (epoch ms). Retries move it later.
    run_at_ms: int
    #: When the run was meant to happen: the first run_at, or a rule's slot.
    scheduled_ms: int
    #: When it was enqueued (epoch ms; client clock, informational).
    enqueued_at_ms: int
    #: 1 on the first attempt; each retry adds one.
    attempt: int = 1
    #: The recurring rule that fired this run, if any.
    schedule_id: str | None = None
    #: Per-run override of the task's max_attempts.
    max_attempts: int | None = None
    #: Set on a rule's fire that holds the rule's overlap lease: the lease TTL to renew (ms).
    lease_ms: int | None = None
    #: W3C trace context of the enqueue (`traceparent`, `tracestate`), when tracing is on
    #: (zsched/observability/tracing.py). Retries keep it.
    trace: dict[str, str] | None = None

    def encode(self) -> bytes:
        """msgpack bytes of this envelope, in the compact form of protocol version 2."""
        return pack_fields(self.as_array())

    def as_array(self) -> list[Any]:
        # Positional, without the run id (the key of `runs`, a field of every stream entry),
        # trailing defaults left out: field names and the id took 74 of a ~110-byte payload's
        # 211-byte map envelope; the array is 137 bytes, two allocator classes smaller.
        a: list[Any] = [VERSION, self.task, self.payload, self.run_at_ms, self.enqueued_at_ms,
                        None if self.scheduled_ms == self.run_at_ms else self.scheduled_ms,
                        None if self.attempt == 1 else self.attempt,
                        self.schedule_id, self.max_attempts, self.lease_ms, self.trace]  # fmt: skip
        while len(a) > 5 and a[-1] is None:
            a.pop()
        return a

    def as_fields(self) -> dict[str, Any]:
        """The fields of this envelope as a version 1 map (JSON writers, docs, tests)."""
        d: dict[str, Any] = {
            "v": 1,
            "run_id": self.run_id,
            "task": self.task,
            "payload": self.payload,
            "run_at_ms": self.run_at_ms,
        }
        if self.scheduled_ms != self.run_at_ms:
            d["scheduled_ms"] = self.scheduled_ms
        d["enqueued_at_ms"] = self.enqueued_at_ms
        if self.attempt != 1:
            d["attempt"] = self.attempt
        if self.schedule_id is not None:
            d["schedule_id"] = self.schedule_id
        if self.max_attempts is not None:
            d["max_attempts"] = self.max_attempts
        if self.lease_ms is not None:
            d["lease_ms"] = self.lease_ms
        if self.trace:
            d["trace"] = self.trace
        return d

    def next_attempt(self, run_at_ms: int) -> Envelope:
        """The envelope of the retry: attempt + 1, due at `run_at_ms`."""
        return replace(self, attempt=self.attempt + 1, run_at_ms=run_at_ms)


def encode_first(task: str, payload: Payload, run_at_ms: int, now_ms: int,
                 trace: dict[str, str] | None = None) -> bytes:  # fmt: skip
    """The bytes of `Envelope(run_id, task, payload, run_at_ms, run_at_ms, now_ms).encode()`,
    the first attempt of a run, without building the Envelope (enqueue's hot path: the frozen
    dataclass costs as much as packing it)."""
    if trace:
        return pack_fields([VERSION, task, payload, run_at_ms, now_ms, *[None] * 5, trace])
    return pack_fields([VERSION, task, payload, run_at_ms, now_ms])


def pack_fields(fields: dict[str, Any] | list[Any]) -> bytes:
    try:
        return msgpack.packb(fields, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"payload cannot be encoded as msgpack: {exc}") from exc


def check_payload(payload: Payload, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> int:
    """Refuse a payload that msgpack cannot encode or that is over `max_bytes`; return its size."""
    try:
        size = len(msgpack.packb(payload, use_bin_type=True))
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(
            f"payload of type {type(payload).__name__} cannot be serialised "
            f"(msgpack types only: None, bool, int, float, str, bytes, list, dict): {exc}"
        ) from exc
    if size > max_bytes:
        raise PayloadError(f"payload is {size} bytes, over the limit of {max_bytes} bytes")
    return size


def _require(d: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in d:
        raise PayloadError(f"envelope field {name!r} is missing")
    value = d[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PayloadError(f"envelope field {name!r} has type {type(value).__name__}")
    return value


def _optional_int(d: dict[str, Any], name: str, default: int | None, minimum: int) -> int | None:
    # Foreign clients write these fields too: a wrong type must be a PayloadError naming the
    # field (a dead letter), never a TypeError that escapes the worker's decode handling.
    value = d.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PayloadError(
            f"envelope field {name!r} must be an integer >= {minimum}, got {value!r}"[:300]
        )
    return value


#: Version 2's positions after `v`, in order; the first three are required.
V2_FIELDS = ("task", "payload", "run_at_ms", "enqueued_at_ms", "scheduled_ms", "attempt",
       "schedule_id", "max_attempts", "lease_ms", "trace")  # fmt: skip


def decode(raw: bytes, run_id: str | None = None) -> Envelope:
    """Decode envelope bytes (a version 2 msgpack array, or a version 1 map in msgpack or JSON
    starting with `{`). `run_id` is the run's id where the bytes came from (the stream entry's
    field, the key in `runs`): a version 2 envelope does not repeat it. Raises PayloadError."""
    env = _decode_plain_v2(raw, run_id)
    return env if env is not None else decode_checked(raw, run_id)


def decode_checked(raw: bytes, run_id: str | None = None) -> Envelope:
    """`decode`, field by field: each check in turn, with the message naming what failed
    (decode's own path for anything but a plain version 2 array; tests compare the two)."""
    d = _fields(raw, run_id)
    run_id = _require(d, "run_id", str)
    if not run_id:
        raise PayloadError("envelope field 'run_id' is empty")
    task = _require(d, "task", str)
    if not task:
        raise PayloadError("envelope field 'task' is empty")
    run_at_ms = _require(d, "run_at_ms", int)
    if run_at_ms < 0:
        raise PayloadError(f"envelope field 'run_at_ms' is negative ({run_at_ms})")
    _check_instant("run_at_ms", run_at_ms)
    schedule_id = d.get("schedule_id")
    if schedule_id is not None and not isinstance(schedule_id, str):
        raise PayloadError(f"envelope field 'schedule_id' has type {type(schedule_id).__name__}")
    return Envelope(
        run_id=run_id,
        task=task,
        payload=d.get("payload"),
        run_at_ms=run_at_ms,
        scheduled_ms=_check_instant("scheduled_ms", _optional_int(d, "scheduled_ms", run_at_ms, 0)),
        enqueued_at_ms=_check_instant("enqueued_at_ms", _optional_int(d, "enqueued_at_ms", 0, 0)),
        attempt=_optional_int(d, "attempt", 1, 1) or 1,
        schedule_id=schedule_id,
        max_attempts=_optional_int(d, "max_attempts", None, 1),
        lease_ms=_optional_int(d, "lease_ms", None, 1),
        trace=_trace(d.get("trace")),
    )


#: Pads a version 2 array to all of its known positions (it has at least 4).
_PAD = (None,) * (len(V2_FIELDS) - 3)


def _decode_plain_v2(raw: bytes, run_id: str | None) -> Envelope | None:
    """The worker's hot path: a version 2 array that passes every check of `decode`, as the
    same Envelope, in one pass (no map of names, ~4x quicker); None for anything else (JSON,
    a map, a malformed or unusual array), which `decode` then checks field by field for its
    error message. It accepts only what `decode` accepts: exact types (no bool for an int),
    the same bounds."""
    if not run_id or type(run_id) is not str or raw[:1] in (b"", b"{"):
        return None
    try:
        a = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001 - decode() reads it again and names the error
        return None
    if type(a) is not list or len(a) < 4 or a[0] != 2 or type(a[0]) is not int:
        return None
    if len(a) == 5:  # a first attempt of a one-off run (encode_first): nothing else to check
        _v, task, payload, run_at, enqueued = a
        if type(task) is not str or not task or not _instant(run_at) or not _instant(enqueued):
            return None
        return _first(run_id, task, payload, run_at, enqueued)
    _v, task, payload, run_at, enqueued, scheduled, attempt, sid, most, lease, trace = (
        *a[:11], *_PAD)[:11]  # fmt: skip
    if type(task) is not str or not task or not _instant(run_at):
        return None
    if not (enqueued is None or _instant(enqueued)) or not (
        scheduled is None or _instant(scheduled)):  # fmt: skip
        return None
    if not (_positive(attempt) and _positive(most) and _positive(lease)):
        return None
    if sid is not None and type(sid) is not str:
        return None
    e = _new(Envelope)
    _set_id(e, run_id)
    _set_task(e, task)
    _set_payload(e, payload)
    _set_run_at(e, run_at)
    _set_scheduled(e, run_at if scheduled is None else scheduled)
    _set_enqueued(e, enqueued or 0)
    _set_attempt(e, attempt or 1)
    _set_schedule(e, sid)
    _set_most(e, most)
    _set_lease(e, lease)
    _set_trace(e, None if trace is None else _trace(trace))
    return e


def _first(run_id: str, task: str, payload: Any, run_at: int, enqueued: int) -> Envelope:
    """The Envelope of a first attempt with every optional field at its default."""
    e = _new(Envelope)
    _set_id(e, run_id)
    _set_task(e, task)
    _set_payload(e, payload)
    _set_run_at(e, run_at)
    _set_scheduled(e, run_at)
    _set_enqueued(e, enqueued)
    _set_attempt(e, 1)
    _set_schedule(e, None)
    _set_most(e, None)
    _set_lease(e, None)
    _set_trace(e, None)
    return e


# The frozen dataclass's __init__ sets each of its 11 fields through object.__setattr__
# (~2 us, half of a decode); its slots' own setters do the same in half the time. Only
# _decode_plain_v2 uses them, and sets every field.
_new = object.__new__
(_set_id, _set_task, _set_payload, _set_run_at, _set_scheduled, _set_enqueued, _set_attempt,
 _set_schedule, _set_most, _set_lease, _set_trace) = (
    getattr(Envelope, f).__set__ for f in Envelope.__slots__)  # fmt: skip


def _instant(ms: Any) -> bool:
    return type(ms) is int and 0 <= ms <= MAX_INSTANT_MS


def _positive(value: Any) -> bool:
    """None (not given) or an int >= 1: what `_optional_int(..., minimum=1)` accepts."""
    return value is None or (type(value) is int and value >= 1)


def _trace(value: Any) -> dict[str, str] | None:
    """A trace context as written by a client: a map of text to text, else ignored (tracing
    must never make a run undecodable)."""
    if not isinstance(value, dict) or not value:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return {k: v for k, v in value.items() if k in ("traceparent", "tracestate")} or None


def _check_instant(name: str, ms: int | None) -> int:
    if ms is not None and ms > MAX_INSTANT_MS:
        raise PayloadError(f"envelope field {name!r} is after the year 9999 ({ms})")
    return ms or 0


def _fields(raw: bytes, run_id: str | None) -> dict[str, Any]:
    """The envelope's fields by name, its protocol version checked; the rest is `decode`'s."""
    if not raw:
        raise PayloadError("envelope is empty")
    d: Any
    try:
        if raw[:1] == b"{":
            d = json.loads(raw)
        else:
            d = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (
        ValueError, TypeError, RecursionError,
        msgpack.ExtraData, msgpack.FormatError, msgpack.StackError,
    ) as exc:  # fmt: skip
        # TypeError: a msgpack map with an unhashable key; RecursionError: deeply nested JSON.
        raise PayloadError(f"envelope is neither msgpack nor JSON: {exc}") from exc
    if isinstance(d, list):
        d = _v2_fields(d, run_id)
    elif not isinstance(d, dict):
        raise PayloadError(f"envelope is a {type(d).__name__}, not a map or an array")
    version = d.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PayloadError("envelope field 'v' (protocol version) is missing or not an integer")
    if version not in READS:
        reads = " and ".join(map(str, READS))
        raise PayloadError(f"unknown protocol version {version} (this worker reads {reads})")
    return cast(dict[str, Any], d)


def v2_named(a: list[Any]) -> dict[str, Any]:
    """A version 2 array's elements by field name (`v` included), nil ones left out; no checks.
    Elements past the known ones are a later minor version's: ignored."""
    return {k: v for k, v in zip(("v", *V2_FIELDS), a, strict=False) if v is not None}


def _v2_fields(a: list[Any], run_id: str | None) -> dict[str, Any]:
    """The fields of a version 2 array, named; the checks are then the map's (same messages)."""
    v = a[0] if a else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise PayloadError("envelope is an array whose first element (protocol version) is not 2")
    if v != 2:
        raise PayloadError(
            f"unknown protocol version {v} in an array envelope (arrays are version 2)"
        )
    if len(a) < 4:
        raise PayloadError(
            f"envelope array has {len(a)} elements, needs at least 4 (v, task, payload, run_at_ms)"
        )
    if run_id is None:
        raise PayloadError("a version 2 envelope does not carry its run id and none was given")
    return {**v2_named(a), "run_id": run_id}
