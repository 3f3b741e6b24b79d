from __future__ import annotations

import json

import msgpack
import pytest

from zsched.envelope import VERSION, Envelope, check_payload, decode
from zsched.errors import PayloadError


def env(**kw: object) -> Envelope:
    base = dict(run_id="r1", task="t", payload={"a": [1, 2]}, run_at_ms=5, scheduled_ms=5,
                enqueued_at_ms=1)  # fmt: skip
    base.update(kw)
    return Envelope(**base)  # type: ignore[arg-type]


def test_envelope_round_trips_through_msgpack() -> None:
    e = env(schedule_id="s", max_attempts=4, attempt=2)
    assert decode(e.encode()) == e


def test_envelope_field_names_are_words_with_a_version() -> None:
    d = msgpack.unpackb(env(scheduled_ms=4, attempt=2).encode())
    assert d["v"] == VERSION
    assert {"run_id", "task", "payload", "run_at_ms", "scheduled_ms", "attempt"} <= set(d)


def test_fields_at_their_default_are_left_out_and_read_back() -> None:
    first = env()  # attempt 1, scheduled_ms == run_at_ms
    d = msgpack.unpackb(first.encode())
    assert list(d) == ["v", "run_id", "task", "payload", "run_at_ms", "enqueued_at_ms"]
    assert decode(first.encode()) == first
    retry = first.next_attempt(run_at_ms=9)
    d = msgpack.unpackb(retry.encode())
    assert (d["attempt"], d["scheduled_ms"], d["run_at_ms"]) == (2, 5, 9)
    assert decode(retry.encode()) == retry
    assert len(first.encode()) == len(retry.encode()) - len(b"\xaascheduled_ms\x05\xa7attempt\x02")


def test_json_envelope_is_accepted() -> None:
    raw = json.dumps({"v": 1, "run_id": "j", "task": "t", "payload": [1], "run_at_ms": 9})
    e = decode(raw.encode())
    assert (e.run_id, e.payload, e.scheduled_ms, e.attempt) == ("j", [1], 9, 1)


def test_unknown_extra_fields_are_ignored() -> None:
    d = msgpack.unpackb(env().encode())
    d["future_field"] = 1
    assert decode(msgpack.packb(d)).run_id == "r1"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"v": 2, "run_id": "r", "task": "t", "run_at_ms": 1}, "unknown protocol version 2"),
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
    from zsched.envelope import encode_first

    for payload in (None, {"a": [1, 2.5, None]}, "é", b"\x00\xff", [True, {"k": {}}]):
        want = Envelope("r9", "task", payload, 1_800_000_000_123, 1_800_000_000_123, 42).encode()
        assert encode_first("r9", "task", payload, 1_800_000_000_123, 42) == want
