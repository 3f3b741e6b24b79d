from __future__ import annotations

import json

import msgpack
import pytest

from zsched.errors import PayloadError
from zsched.protocol.envelope import (
    MAX_INSTANT_MS,
    VERSION,
    Envelope,
    check_payload,
    decode,
    decode_checked,
)


def env(**kw: object) -> Envelope:
    base = dict(run_id="r1", task="t", payload={"a": [1, 2]}, run_at_ms=5, scheduled_ms=5,
                enqueued_at_ms=1)  # fmt: skip
    base.update(kw)
    return Envelope(**base)  # type: ignore[arg-type]


def test_envelope_round_trips_through_msgpack() -> None:
    e = env(schedule_id="s", max_attempts=4, attempt=2, lease_ms=9)
    assert decode(e.encode(), "r1") == e


def test_an_envelope_is_a_version_2_array_without_its_run_id() -> None:
    a = msgpack.unpackb(env(scheduled_ms=4, attempt=2).encode())
    assert a == [VERSION, "t", {"a": [1, 2]}, 5, 1, 4, 2] and VERSION == 2
    # The run id comes from where the bytes were found (stream entry field, key in runs).
    assert decode(env().encode(), "elsewhere").run_id == "elsewhere"
    with pytest.raises(PayloadError, match="does not carry its run id"):
        decode(env().encode())


def test_fields_at_their_default_are_left_out_and_read_back() -> None:
    first = env()  # attempt 1, scheduled_ms == run_at_ms
    assert msgpack.unpackb(first.encode()) == [2, "t", {"a": [1, 2]}, 5, 1]
    assert decode(first.encode(), "r1") == first
    retry = first.next_attempt(run_at_ms=9)
    assert msgpack.unpackb(retry.encode()) == [2, "t", {"a": [1, 2]}, 9, 1, 5, 2]
    assert decode(retry.encode(), "r1") == retry
    ruled = env(schedule_id="s")  # a gap is nil
    assert msgpack.unpackb(ruled.encode()) == [2, "t", {"a": [1, 2]}, 5, 1, None, None, "s"]
    assert decode(ruled.encode(), "r1") == ruled


def test_a_version_1_map_is_still_read_in_msgpack_and_json() -> None:
    e = env(scheduled_ms=4, attempt=2, schedule_id="s", max_attempts=3, lease_ms=7)
    assert decode(msgpack.packb(e.as_fields()), "ignored") == e
    assert decode(json.dumps(e.as_fields()).encode()) == e
    raw = json.dumps({"v": 1, "run_id": "j", "task": "t", "payload": [1], "run_at_ms": 9})
    e = decode(raw.encode())
    assert (e.run_id, e.payload, e.scheduled_ms, e.attempt) == ("j", [1], 9, 1)


def test_unknown_extra_fields_are_ignored() -> None:
    d = env().as_fields()
    d["future_field"] = 1
    assert decode(msgpack.packb(d)).run_id == "r1"
    a = msgpack.unpackb(env(lease_ms=3).encode())
    assert decode(msgpack.packb([*a, "a later minor's element"]), "r1") == env(lease_ms=3)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([3, "t", None, 1], "unknown protocol version 3"),
        (["2", "t", None, 1], "first element .protocol version. is not 2"),
        ([], "first element"),
        ([2, "t", None], "needs at least 4"),
        ([2, "", None, 1], "'task' is empty"),
        ([2, 7, None, 1], "'task' has type int"),
        ([2, "t", None, "soon"], "'run_at_ms' has type str"),
        ([2, "t", None, -1], "'run_at_ms' is negative"),
        ([2, "t", None, 1, 0, None, 0], "'attempt'"),
        ([2, "t", None, 1, 0, 1.5], "'scheduled_ms'"),
        ([2, "t", None, 1, 0, None, None, 5], "'schedule_id' has type int"),
        ([2, "t", None, 1, 0, None, None, None, 0], "'max_attempts'"),
        ([2, "t", None, 1, 0, None, None, None, None, "x"], "'lease_ms'"),
    ],
)
def test_bad_version_2_envelopes_raise_payload_error_naming_the_field(
    items: list, message: str
) -> None:
    with pytest.raises(PayloadError, match=message):
        decode(msgpack.packb(items), "r")


def test_a_version_2_envelope_with_an_empty_run_id_field_is_refused() -> None:
    with pytest.raises(PayloadError, match="'run_id' is empty"):
        decode(env().encode(), "")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"v": 3, "run_id": "r", "task": "t", "run_at_ms": 1}, "unknown protocol version 3"),
        ({"run_id": "r", "task": "t", "run_at_ms": 1}, "'v'"),
        ({"v": 1, "task": "t", "run_at_ms": 1}, "'run_id' is missing"),
        ({"v": 1, "run_id": "r", "task": "", "run_at_ms": 1}, "'task' is empty"),
        ({"v": 1, "run_id": "r", "task": "t", "run_at_ms": "soon"}, "'run_at_ms' has type str"),
        ({"v": 1, "run_id": 5, "task": "t", "run_at_ms": 1}, "'run_id' has type int"),
        ({"v": 1, "run_id": "r", "task": "t", "run_at_ms": 1, "attempt": 0}, "'attempt'"),
    ],
)
def test_bad_envelopes_raise_payload_error_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        decode(msgpack.packb(fields))


@pytest.mark.parametrize("raw", [b"", b"\xc1", b"[1,2]", b"{not json", b"\x93\x01\x02\x03"])
def test_garbage_raises_payload_error(raw: bytes) -> None:
    with pytest.raises(PayloadError):
        decode(raw)


def test_payload_that_cannot_be_serialised_is_refused() -> None:
    with pytest.raises(PayloadError, match="cannot be serialised"):
        check_payload({"when": object()})


def test_payload_over_the_limit_is_refused_with_its_size() -> None:
    with pytest.raises(PayloadError, match="over the limit of 100 bytes"):
        check_payload("x" * 200, max_bytes=100)


def test_enqueues_fast_encoding_is_the_envelopes_own() -> None:
    from zsched.protocol.envelope import encode_first

    for payload in (None, {"a": [1, 2.5, None]}, "é", b"\x00\xff", [True, {"k": {}}]):
        want = Envelope("r9", "task", payload, 1_800_000_000_123, 1_800_000_000_123, 42).encode()
        assert encode_first("task", payload, 1_800_000_000_123, 42) == want


#: Version 2 arrays on both sides of every check decode's quick path makes.
_ARRAYS = [
    [2, "t", None, 1],
    [2, "t", {"a": 1}, 5, 3, 7, 2, "s", 4, 9, {"traceparent": "x"}],
    [2, "t", None, 1, 0, None, None, None, None, None, None, "a later minor's extra"],
    [2, "t", None, True],
    [2, "t", None, 1.0],
    [2, "t", None, -1],
    [2, "t", None, MAX_INSTANT_MS],
    [2, "t", None, MAX_INSTANT_MS + 1],
    [2, "t", None, 1, MAX_INSTANT_MS + 1],
    [2, "t", {"a": [1]}, 5, 3],  # a first attempt, as encode_first writes it
    [2, "t", None, 1, None],
    [2, "t", None, 1, MAX_INSTANT_MS],
    [2, "", None, 1, 0],
    [2, 7, None, 1, 0],
    [2, "t", None, True, 0],
    [2, "t", None, 1, -1],
    [2, "t", None, 1, False],
    [2, "t", None, 1, 0, 0],
    [2, "t", None, 1, 0, -2],
    [2, "t", None, 1, 0, None, 0],
    [2, "t", None, 1, 0, None, True],
    [2, "t", None, 1, 0, None, 1],
    [2, "t", None, 1, 0, None, None, b"s"],
    [2, "t", None, 1, 0, None, None, None, 0],
    [2, "t", None, 1, 0, None, None, None, None, 0],
    [2, "t", None, 1, 0, *[None] * 5, ["x"]],
    [2, "t", None, 1, 0, *[None] * 5, {"traceparent": 1}],
    [2, "", None, 1],
    [2, b"t", None, 1],
    [2.0, "t", None, 1],
    [True, "t", None, 1],
    [3, "t", None, 1],
    [2, "t", None],
    [],
    "x",
    {},
]


@pytest.mark.parametrize("items", _ARRAYS, ids=range(len(_ARRAYS)))
@pytest.mark.parametrize("run_id", ["r", "", None])
def test_the_quick_decode_and_the_field_by_field_one_agree(
    items: object, run_id: str | None
) -> None:
    raw = msgpack.packb(items, use_bin_type=True)
    try:
        expected: object = decode_checked(raw, run_id)
    except PayloadError as exc:
        expected = str(exc)
    try:
        got: object = decode(raw, run_id)
    except PayloadError as exc:
        got = str(exc)
    assert got == expected
