"""Bad input from clients in other languages, sent the way they send it: raw EVAL of
lua/enqueue.lua (and redis-cli). Each case gets a clear error reply from the script with
nothing written, or a dead letter whose reason names the problem; never a lost run and never
a worker crash (docs/protocol.md, "Bad envelopes")."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import msgpack
import pytest
import redis

from tests.state import delayed_count
from zsched.protocol.keys import QueueKeys
from zsched.protocol.replies import EnqueueCode
from zsched.store import delayed
from zsched.store import scripts as S

SOURCE = S.source("enqueue")
WINDOW, LIMIT = "3600000", str(512 * 1024 + 4096)  # what every client passes by default
MISSING = object()


def envelope(run_id: Any = "bad", **fields: Any) -> bytes:
    """A msgpack envelope; a field given as MISSING is left out."""
    d: dict[str, Any] = {"v": 1, "run_id": run_id, "task": "t", "payload": {"x": 1},
                         "run_at_ms": 1_800_000_000_000, "attempt": 1}  # fmt: skip
    d.update(fields)
    return msgpack.packb({k: v for k, v in d.items() if v is not MISSING}, use_bin_type=True)  # type: ignore[no-any-return]


def json_envelope(run_id: str = "bad", **fields: Any) -> bytes:
    d: dict[str, Any] = {"v": 1, "run_id": run_id, "task": "t", "payload": {"x": 1},
                         "run_at_ms": 1_800_000_000_000}  # fmt: skip
    d.update(fields)
    return json.dumps(d).encode()


def key_args(queue: str) -> list[str]:
    k = QueueKeys(queue)
    return [k.delayed, k.runs, k.done, k.stats, k.wake]


def raw_enqueue(r: Any, queue: str, *argv: Any) -> Any:
    """EVAL of the enqueue.lua source with 5 KEYS, as a client without a wrapper sends it."""
    return r.execute_command("EVAL", SOURCE, 5, *key_args(queue), *argv)


def nothing_written(r: Any, queue: str) -> bool:
    return int(r.exists(*QueueKeys(queue).all_fixed())) == 0


# -- refused by the script ------------------------------------------------------------------

RUN_AT_MESSAGE = "run_at_ms must be a whole number of epoch milliseconds >= 0, got "
REFUSED = [
    ("no runs", ["", WINDOW, LIMIT], "expected groups of 4 arguments"),
    ("missing envelope", ["", WINDOW, LIMIT, "r1", "0", "t"], "expected groups of 4 arguments"),
    ("window not a number", ["", "an hour", LIMIT, "r1", "0", "t", envelope()],
     "dedupe_window_ms and max_envelope_bytes must be numbers"),
    ("limit missing", ["", WINDOW, "", "r1", "0", "t", envelope()],
     "dedupe_window_ms and max_envelope_bytes must be numbers"),
    ("empty run id", ["", WINDOW, LIMIT, "", "0", "t", envelope()], "run 0: run_id is empty"),
    ("long run id", ["", WINDOW, LIMIT, "x" * 513, "0", "t", envelope()],
     "run_id is longer than 512 bytes"),
    ("empty task", ["", WINDOW, LIMIT, "r1", "0", "", envelope()], "run r1: task is empty"),
    ("long task", ["", WINDOW, LIMIT, "r1", "0", "t" * 257, envelope()],
     "run r1: task name is longer than 256 bytes"),
    ("empty envelope", ["", WINDOW, LIMIT, "r1", "0", "t", ""], "run r1: envelope is empty"),
    ("a bad run spoils its batch",
     ["", WINDOW, LIMIT, "good", "0", "t", envelope("good"), "bad", "soon", "t", envelope("bad")],
     "run bad: " + RUN_AT_MESSAGE + "soon"),
] + [
    (f"run_at {v!r}", ["", WINDOW, LIMIT, "r1", v, "t", envelope()], f"run r1: {RUN_AT_MESSAGE}{v}")
    for v in ["soon", "-5", "+-5", "1.5", "nan", "inf", "", "+", "1e400", "12ms", "1e3", "0x10",
              " 5", "5 ", "-0", "++5", "253402300800000", "5.", "+5.0", "5,0", "5/", "/5", "5+5",
              "0+5", "+5+", "\t5", "00000000000000001e3", "+253402300799999"]
] + [
    ("run_id not UTF-8", ["", WINDOW, LIMIT, b"r\xff", "0", "t", envelope()],
     "run 0: run_id is not valid UTF-8"),
    ("run_id cut inside a character", ["", WINDOW, LIMIT, "ok", "0", "t", envelope(),
     "é".encode()[:1], "0", "t", envelope()], "run 1: run_id is not valid UTF-8"),
    ("run_at with NUL", ["", WINDOW, LIMIT, "r1", b"5\x00", "t", envelope()],
     f"run r1: {RUN_AT_MESSAGE}5"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_bad_arguments_get_an_error_reply_naming_the_problem_and_write_nothing(
    backend, queue, argv, message
):
    with pytest.raises(redis.ResponseError, match=re.escape(message)):
        raw_enqueue(backend.sync, queue, *argv)
    assert nothing_written(backend.sync, queue)


def test_a_bad_run_late_in_a_full_batch_is_named(backend, queue) -> None:
    """The batch is checked as a whole first (ids and dues over 4,000 bytes, in slices); a
    failure there is then found run by run, so the message names the first bad run."""
    groups = [x for i in range(1000) for x in (f"run-{i:04d}-" + "x" * 40, str(i), "t", b"e")]
    groups[4 * 998] = "run-998-é"  # valid UTF-8: accepted
    groups[4 * 999] = b"run-999-\xe9"  # latin-1: not UTF-8
    with pytest.raises(redis.ResponseError, match="run 999: run_id is not valid UTF-8"):
        raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, *groups)
    assert nothing_written(backend.sync, queue)
    groups[4 * 999 + 1] = "+5"  # relative, and a bad due after it
    groups[4 * 999], groups[4 * 997 + 1] = "run-999", "5."
    with pytest.raises(
        redis.ResponseError, match=re.escape(f"run {groups[4 * 997]}: {RUN_AT_MESSAGE}5.")
    ):
        raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, *groups)
    assert nothing_written(backend.sync, queue)


@pytest.mark.parametrize("bad", ["", "+", "5+"])
def test_a_bad_due_in_a_batch_of_digits_is_named(backend, queue, bad) -> None:
    """A full batch whose dues are all digits skips the per-run pattern; an empty due (the
    concatenation cannot tell it) and a stray '+' are still refused by the per-run checks."""
    groups = [x for i in range(200) for x in (f"r{i}", str(i), "t", b"e")]
    groups[4 * 120 + 1] = bad
    with pytest.raises(redis.ResponseError, match=re.escape(f"run r120: {RUN_AT_MESSAGE}{bad}")):
        raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, *groups)
    assert nothing_written(backend.sync, queue)


@pytest.mark.parametrize("odd", [None, "run-998-é"], ids=["ascii", "one UTF-8 id"])
def test_a_full_batch_of_absolute_and_relative_dues_is_taken_exactly(backend, queue, odd) -> None:
    now = 1_800_000_000_000
    dues = {f"r{i}": str(now + i) for i in range(996)}
    dues |= {"lead": "0" * 15 + "7", "rel": "+2500", "zero": "+0"}
    if odd:
        dues[odd] = "+3"
    groups = [x for rid, at in dues.items() for x in (rid, at, "t", b"e")]
    codes = raw_enqueue(backend.sync, queue, str(now), WINDOW, LIMIT, *groups)
    assert codes == [EnqueueCode.ENQUEUED] * len(dues)
    want = {rid: now + int(at[1:]) if at[0] == "+" else int(at) for rid, at in dues.items()}
    k = QueueKeys(queue)
    assert dict(delayed.runs(backend.sync, k)) == want


def test_an_envelope_over_the_limit_names_its_size_and_the_limit(backend, queue) -> None:
    big = envelope(payload="x" * 600_000)
    with pytest.raises(redis.ResponseError) as err:
        raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, "r1", "0", "t", big)
    assert f"envelope is {len(big)} bytes, over the limit of {LIMIT}" in str(err.value)
    assert nothing_written(backend.sync, queue)


def test_more_than_1000_runs_in_one_call_are_refused(backend, queue) -> None:
    groups = [x for i in range(1001) for x in (f"r{i}", "0", "t", envelope(f"r{i}"))]
    with pytest.raises(redis.ResponseError, match="at most 1000 runs per call"):
        raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, *groups)
    assert nothing_written(backend.sync, queue)


CLI_CASES = [
    (["r1", "soon", "t", '{"v":1}'], "run r1: " + RUN_AT_MESSAGE + "soon"),
    (["r1", "-5", "t", '{"v":1}'], "run r1: " + RUN_AT_MESSAGE + "-5"),
    (["r1", "0", "", '{"v":1}'], "run r1: task is empty"),
    (
        ["r1", "0", "t", "{" + "x" * 200 + "}"],
        "run r1: envelope is 202 bytes, over the limit of 100",
    ),
]


@pytest.mark.parametrize(("group", "message"), CLI_CASES)
def test_redis_cli_gets_the_same_error_replies(real, queue, group, message) -> None:
    limit = "100" if "over the limit" in message else LIMIT
    r = subprocess.run(
        ["redis-cli", "-u", real.url, "-e", "EVAL", SOURCE, "5", *key_args(queue), "", WINDOW,
         limit, *group],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert r.returncode == 1
    assert f"ERR zsched enqueue: {message}" in r.stdout + r.stderr
    assert nothing_written(real.sync, queue)


# -- accepted by the script, dead-lettered by the worker ------------------------------------

DEEP = b'{"v":1,"run_id":"bad","task":"t","run_at_ms":1,"payload":%s%s}' % (
    b"[" * 99_999,
    b"]" * 99_999,
)
DEAD = [
    ("missing run_id", envelope(run_id=MISSING), "envelope field 'run_id' is missing"),
    ("missing task", envelope(task=MISSING), "envelope field 'task' is missing"),
    ("missing run_at_ms", envelope(run_at_ms=MISSING), "envelope field 'run_at_ms' is missing"),
    ("missing version", envelope(v=MISSING), "field 'v' (protocol version) is missing"),
    ("version as text", envelope(v="1"), "'v' (protocol version) is missing or not an integer"),
    ("run_at_ms as text", envelope(run_at_ms="soon"), "envelope field 'run_at_ms' has type str"),
    ("run_at_ms as float", envelope(run_at_ms=1.5), "envelope field 'run_at_ms' has type float"),
    ("run_at_ms negative", envelope(run_at_ms=-5), "envelope field 'run_at_ms' is negative"),
    ("task as int", envelope(task=5), "envelope field 'task' has type int"),
    ("task empty", envelope(task=""), "envelope field 'task' is empty"),
    ("run_id empty", envelope(run_id=""), "envelope field 'run_id' is empty"),
    ("run_id as bytes", envelope(run_id=b"r1"), "envelope field 'run_id' has type bytes"),
    ("attempt as text", envelope(attempt="2"), "envelope field 'attempt' must be an integer >= 1"),
    ("attempt zero", envelope(attempt=0), "envelope field 'attempt' must be an integer >= 1"),
    ("attempt as bool", envelope(attempt=True), "envelope field 'attempt' must be an integer >= 1"),
    ("max_attempts zero", envelope(max_attempts=0), "field 'max_attempts' must be an integer >= 1"),
    ("enqueued_at_ms as text", envelope(enqueued_at_ms="yesterday"),
     "envelope field 'enqueued_at_ms' must be an integer >= 0"),
    ("scheduled_ms as list", envelope(scheduled_ms=[1]),
     "envelope field 'scheduled_ms' must be an integer >= 0"),
    ("schedule_id as int", envelope(schedule_id=5), "envelope field 'schedule_id' has type int"),
    ("unknown major version", envelope(v=3), "unknown protocol version 3 (this worker reads 1 and 2)"),
    ("unknown major version, JSON", json_envelope(v=3), "unknown protocol version 3"),
    ("JSON run_at_ms with exponent", json_envelope(run_at_ms=1.8e12), "'run_at_ms' has type float"),
    ("JSON cut short", b'{"v": 1, "run_id": "r1",', "envelope is neither msgpack nor JSON"),
    ("JSON after whitespace", b" " + json_envelope(), "envelope is neither msgpack nor JSON"),
    ("JSON array", b'[1, 2]', "envelope is neither msgpack nor JSON"),
    ("JSON nested too deep", DEEP, "envelope is neither msgpack nor JSON"),
    ("msgpack string", msgpack.packb("run"), "envelope is a str, not a map or an array"),
    ("array of version 1", msgpack.packb([1, 2]), "unknown protocol version 1 in an array envelope"),
    ("version 2 array too short", msgpack.packb([2, "t", None]), "needs at least 4"),
    ("version 2 array, task not a str", msgpack.packb([2, 5, None, 1]), "'task' has type int"),
    ("msgpack map with a list key", b"\x81\x91\x01\x01", "envelope is neither msgpack nor JSON"),
    ("garbage", b"\xc1\xc1", "envelope is neither msgpack nor JSON"),
    ("unregistered task", envelope(task="nope"), "unknown task 'nope': not registered"),
]  # fmt: skip


async def consume(backend: Any, queue: str, bad_envelope: bytes) -> tuple[Any, list[Any], int]:
    """Enqueue a bad run and a good one by raw EVAL, then one dispatcher and worker pass."""
    app = backend.app(queue)
    ran: list[Any] = []

    @app.task(name="t")
    def t(payload: Any) -> None:
        ran.append(payload)

    codes = raw_enqueue(backend.sync, queue, "", WINDOW, LIMIT, "bad", "0", "t", bad_envelope,
                        "good", "0", "t", envelope("good", payload="ok"))  # fmt: skip
    assert codes == [EnqueueCode.ENQUEUED, EnqueueCode.ENQUEUED]
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        assert (await d.tick()).moved == 2
        read = await w.tick()  # returns: the worker did not crash on the bad run
    finally:
        await d.close()
        await w.close()
    return app, ran, read


@pytest.mark.parametrize(("raw", "reason"), [c[1:] for c in DEAD], ids=[c[0] for c in DEAD])
async def test_a_bad_envelope_becomes_a_dead_letter_naming_the_problem(backend, queue, raw, reason):
    app, ran, read = await consume(backend, queue, raw)
    assert read == 2
    assert ran == ["ok"]  # the good run next to it was not held up
    (letter,) = app.dead_letters()
    assert letter.run_id == "bad"
    assert reason in letter.reason
    assert letter.envelope == raw  # kept as sent, so it can be inspected and replayed
    assert app.get_run("bad").state == "dead"  # not lost: exactly in the dead letters
    r, k = backend.sync, app.keys
    assert delayed_count(r, k) == r.hlen(k.runs) == r.hlen(k.legacy_entries) == r.xlen(k.ready) == 0


@pytest.mark.parametrize("encode", [envelope, json_envelope], ids=["msgpack", "json"])
async def test_unknown_extra_fields_are_accepted(backend, queue, encode) -> None:
    raw = encode("bad", payload="extra", priority=5, trace={"id": "abc"})
    app, ran, read = await consume(backend, queue, raw)
    assert read == 2
    assert sorted(ran) == ["extra", "ok"]
    assert app.dead_letters() == []
    assert app.get_run("bad").state == "done"
