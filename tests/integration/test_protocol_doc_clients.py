"""docs/protocol.md checked against the code, by a review: each test failed before its fix in
the Node client, the shell client or enqueue.lua (they did not do what the page says)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis.exceptions

from tests.integration.test_cross_language import node, shell_enqueue
from zsched.errors import PayloadError as ClientPayloadError
from zsched.protocol.envelope import PayloadError, decode, encode_first
from zsched.store import scripts as S
from zsched.store.delayed import untag

NODE_DECODE = """
import { decode } from './lib/envelope.js';
const out = {};
for (const [k, hex] of Object.entries(JSON.parse(process.argv[1]))) {
  try { const e = decode(Buffer.from(hex, 'hex'), 'r'); out[k] = ['ok', e.run_at_ms]; }
  catch (x) { out[k] = ['error', x.message]; }
}
console.log(JSON.stringify(out));
"""


def node_decode(node_dir: Path, cases: dict[str, bytes]) -> dict[str, list[Any]]:
    r = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_DECODE,
         json.dumps({k: v.hex() for k, v in cases.items()})],
        cwd=node_dir, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def python_decode(raw: bytes) -> list[Any]:
    try:
        return ["ok", decode(raw, "r").run_at_ms]
    except PayloadError as exc:
        return ["error", str(exc)]


# "Integer fields must be msgpack integers": Python refuses a float there; the Node worker
# refuses a float with a fraction and reads a whole one (1.0) as the integer, as documented.
FLOATS = {
    "msgpack_fraction": msgpack.packb([2, "echo", None, 5.5]),
    "json_fraction": b'{"v":1,"run_id":"r","task":"echo","run_at_ms":1800000000000.5}',
}


@pytest.mark.parametrize("case", sorted(FLOATS))
def test_node_worker_refuses_a_fractional_integer_field_as_python_does(node_dir, case):
    raw = FLOATS[case]
    assert python_decode(raw)[0] == "error"
    assert node_decode(node_dir, {case: raw})[case] == python_decode(raw)


# "The reasons of the Python worker (the Node worker uses the same words)", with the doc's own
# examples: `envelope is a str, ...`, `has type str`, `got '2'`.
WORDS = {
    "not_a_container": msgpack.packb("hello"),
    "run_at_ms_str": msgpack.packb([2, "echo", None, "5"]),
    "attempt_str": msgpack.packb([2, "echo", None, 5, 0, None, "2"]),
    "task_int": msgpack.packb([2, 5, None, 5]),
    "run_at_ms_nil_in_map": msgpack.packb({"v": 1, "run_id": "r", "task": "e", "run_at_ms": None}),
}


@pytest.mark.parametrize("case", sorted(WORDS))
def test_node_dead_letter_reasons_use_the_python_words(node_dir, case):
    raw = WORDS[case]
    assert node_decode(node_dir, {case: raw})[case] == python_decode(raw)


def test_node_worker_refuses_a_run_at_after_the_year_9999_as_python_does(node_dir):
    raw = msgpack.packb([2, "echo", None, 253_402_300_800_000])
    assert python_decode(raw)[0] == "error"
    assert node_decode(node_dir, {"late": raw})["late"] == python_decode(raw)


NODE_BUILD = """
import { buildRun } from './lib/client.js';
try { buildRun({ task: 'echo', payload: 'x'.repeat(Number(process.argv[1])), runId: 'big' });
      console.log(JSON.stringify(['ok'])); }
catch (x) { console.log(JSON.stringify(['error', x.constructor.name])); }
"""


def test_node_client_refuses_a_payload_over_the_documented_limit(real, queue, node_dir):
    # "payload: the payload alone at most 512 KiB encoded, by default"
    size = 512 * 1024 + 1000
    with pytest.raises(ClientPayloadError):
        real.app(queue).enqueue("echo", "x" * size, run_id="big")
    r = subprocess.run(["node", "--input-type=module", "-e", NODE_BUILD, str(size)],
                       cwd=node_dir, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["error", "PayloadError"]


def test_enqueue_refuses_a_relative_due_after_the_year_9999(real, queue):
    # "Errors ...: run_at_ms ... that is after 9999-12-31 (253402300799999)"; retry.lua
    # refuses now + delay_ms past it, enqueue.lua checks only N of "+N".
    app = real.app(queue)
    env = encode_first("echo", None, 253_402_300_799_999, 0)
    call = S.enqueue(app.keys, [("late", "+253402300799999", "echo", env)],  # type: ignore[list-item]
                     now_ms=None, dedupe_window_ms=60_000, max_envelope_bytes=10_000)  # fmt: skip
    with pytest.raises(redis.exceptions.ResponseError, match="run_at_ms"):
        app.scripts.run(call)
    assert real.sync.hget(app.keys.runs, "late") is None


def test_node_reads_the_state_of_a_run_dispatched_before_any_worker(real, queue, node_dir):
    # "Read a run's state", step 2, before a worker made the group: XPENDING says NOGROUP.
    app = real.app(queue)
    app.enqueue("echo", None, run_id="early")

    async def dispatch() -> None:
        d = app.dispatcher(redis=real.async_client())
        try:
            assert (await d.tick()).moved == 1
        finally:
            await d.close()

    asyncio.run(dispatch())
    assert app.get_run("early").state == "ready"
    (shown,) = node(node_dir, "runs.js", "show", "--redis", real.url, "--queue", queue,
                    "--run-id", "early")  # fmt: skip
    assert shown["state"] == "ready"


def test_node_worker_releases_the_overlap_lease_of_a_rule_fire(real, queue, node_dir):
    # The envelope's lease_ms: "renew lease(schedule_id) ... and call unlease.lua when it is
    # done or dead"; "A consumer that runs rule fires must ... call unlease.lua after ack.lua".
    from zsched import FakeClock

    t0 = 1_800_000_000_000 // 3_600_000 * 3_600_000
    app = real.app(queue, clock=FakeClock(t0))
    app.schedule("sweep", "echo", every=60, overlap="skip")

    async def fire() -> None:
        d = app.dispatcher(redis=real.async_client())
        try:
            await d.tick()
        finally:
            await d.close()

    asyncio.run(fire())
    (out,) = node(node_dir, "worker.js", "--redis", real.url, "--queue", queue, "--once")
    assert (out["outcome"], out["written"]) == ("ack", True)
    assert real.sync.exists(app.keys.lease("sweep")) == 0


def test_node_worker_keeps_the_overlap_lease_of_a_rule_fire_it_retries(real, queue, node_dir):
    # "call extend.lua after retry.lua": the lease outlives the retry's wait (issue 18).
    from zsched import FakeClock

    t0 = 1_800_000_000_000 // 3_600_000 * 3_600_000
    app = real.app(queue, clock=FakeClock(t0))
    app.schedule("sweep", "fail", every=60, overlap="skip", lease=2)

    async def fire() -> None:
        d = app.dispatcher(redis=real.async_client())
        try:
            await d.tick()
        finally:
            await d.close()

    asyncio.run(fire())
    (out,) = node(node_dir, "worker.js", "--redis", real.url, "--queue", queue, "--once",
                  "--retry-delay-ms", "300000")  # fmt: skip
    assert (out["outcome"], out["written"]) == ("retry", True)
    lease = app.keys.lease("sweep")
    assert real.sync.get(lease) == b"sweep@" + out["run_id"].split("@", 1)[1].encode()
    assert real.sync.pttl(lease) == -1  # kept for the whole wait (no TTL), not the 2 s lease


def test_shell_client_writes_a_json_envelope_a_worker_can_decode(real, queue):
    # The script took run_at_ms "007" (decimal digits) and pasted it into the JSON envelope as
    # is; JSON forbids leading zeros, so the run was enqueued, then dead-lettered as undecodable.
    app = real.app(queue)
    r = shell_enqueue(real.url, queue, "--task", "echo", "--run-id", "z", "--run-at-ms", "007",
                      ok=False)  # fmt: skip
    assert r.returncode != 0 and "without leading zeros" in r.stderr
    assert real.sync.hget(app.keys.runs, "z") is None
    r = shell_enqueue(real.url, queue, "--task", "echo", "--run-id", "z", "--max-attempts", "0",
                      ok=False)  # fmt: skip
    assert r.returncode != 0 and "--max-attempts must be at least 1" in r.stderr
    shell_enqueue(real.url, queue, "--task", "echo", "--run-id", "z", "--run-at-ms", "7")
    assert decode(untag(real.sync.hget(app.keys.runs, "z"))[1], "z").run_at_ms == 7
