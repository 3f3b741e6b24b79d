"""Property tests: the envelope decoder, the cron front end and the CLI time parsers return a
value or raise their documented error (PayloadError, RuleError, UsageError), nothing else."""

from __future__ import annotations

import json
import math
from datetime import datetime

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zsched import PayloadError, RuleError
from zsched.cli.common import UsageError
from zsched.cli.enqueue import parse_at, parse_seconds
from zsched.protocol.envelope import Envelope, decode
from zsched.rules.triggers import Cron

FAST = settings(max_examples=400, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
FIELDS = ["v", "run_id", "task", "payload", "run_at_ms", "scheduled_ms", "enqueued_at_ms",
          "attempt", "schedule_id", "max_attempts", "lease_ms"]  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True), st.text(max_size=20), st.binary(max_size=20),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
envelopes = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), values, max_size=12)


def decodes_or_payload_error(raw: bytes, run_id: str | None = None) -> None:
    for rid in {run_id, "r"}:  # with and without the run id a version 2 array needs
        try:
            env = decode(raw, rid)
        except PayloadError:
            continue
        assert isinstance(env, Envelope) and env.run_id and env.task and env.attempt >= 1


@FAST
@given(st.binary(max_size=600))
def test_any_bytes_decode_to_an_envelope_or_a_payload_error(raw: bytes) -> None:
    decodes_or_payload_error(raw)


@FAST
@given(envelopes, st.integers(min_value=0, max_value=2))
def test_any_map_of_fields_decodes_or_is_a_payload_error(fields: dict, version_hint: int) -> None:
    fields = {**fields, "v": fields.get("v", version_hint)}
    decodes_or_payload_error(msgpack.packb(fields, use_bin_type=True))
    try:
        text = json.dumps(fields)
    except (TypeError, ValueError):
        return  # bytes or NaN have no JSON form: the msgpack case covered them
    decodes_or_payload_error(text.encode())


@FAST
@given(st.lists(values, max_size=12), st.integers(min_value=0, max_value=3), st.text(max_size=5))
def test_any_array_decodes_or_is_a_payload_error(items: list, version: int, run_id: str) -> None:
    decodes_or_payload_error(msgpack.packb([version, *items], use_bin_type=True), run_id)
    decodes_or_payload_error(msgpack.packb(items, use_bin_type=True), run_id)


@FAST
@given(st.builds(lambda n: b"{" * n + b"}" * n, st.integers(min_value=0, max_value=5000)))
def test_deeply_nested_input_is_a_payload_error_not_a_recursion_crash(raw: bytes) -> None:
    decodes_or_payload_error(raw)


TOKENS = ["*", "*/5", "0", "59", "60", "1-5", "5-1", "1,2", "MON", "JAN", "L", "W", "#", "?",
          "H", "@daily", "@reboot", "-", "/", "99999999999", ""]  # fmt: skip
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Mars/Olympus", "", "utc", "../etc/passwd",
         "/etc/localtime", "Europe/Berlin\x00", "EST5EDT", "+01:00"]  # fmt: skip


@FAST
@given(
    st.one_of(st.lists(st.sampled_from(TOKENS), max_size=8).map(" ".join), st.text(max_size=30)),
    st.one_of(st.none(), st.sampled_from(ZONES), st.text(max_size=20)),
)
def test_cron_front_end_builds_a_rule_or_raises_rule_error(expr: str, tz: str | None) -> None:
    try:
        rule = Cron(expr, tz)
    except RuleError:
        return
    assert rule.next_after_ms(0) > 0


@FAST
@given(st.one_of(st.text(max_size=40),
                 st.datetimes().map(datetime.isoformat),
                 st.datetimes().map(lambda d: d.isoformat() + "Z")))  # fmt: skip
def test_parse_at_returns_an_aware_time_or_raises_usage_error(text: str) -> None:
    try:
        dt = parse_at(text)
    except UsageError:
        return
    assert dt.tzinfo is not None and dt.utcoffset() is not None


@FAST
@given(st.one_of(st.text(max_size=30), st.floats().map(repr), st.integers().map(str)))
def test_parse_seconds_returns_finite_seconds_or_raises_usage_error(text: str) -> None:
    try:
        s = parse_seconds(text)
    except UsageError:
        return
    assert math.isfinite(s) and s >= 0
