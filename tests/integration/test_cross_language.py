"""Clients in other languages speak docs/protocol.md: runs enqueued from Node.js and the shell
run on Python workers, runs enqueued from Python run on the Node worker, dedupe holds across
languages, and the same enqueue leaves the same Redis state whichever client made it."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import queue as queue_mod
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest
from redis_server import RedisServer

import zsched
from tests.state import delayed_count, delayed_ids, envelope_of
from zsched.protocol.envelope import Envelope, decode, v2_named
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.protocol.replies import CancelCode, EnqueueCode, HoldCode
from zsched.protocol.runids import created_ms
from zsched.runs import entry_shape
from zsched.store import scripts as S
from zsched.store.delayed import untag

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "examples" / "node"
SHELL_ENQUEUE = ROOT / "examples" / "shell" / "enqueue.sh"
PAYLOAD = {"to": "a@b.c", "n": [1, 2.5, None, True, -7], "s": 'é ü "q" \\', "nested": {"k": []}}


def node(node_dir: Path, script: str, *args: str) -> list[dict[str, Any]]:
    r = subprocess.run(
        ["node", script, *args], cwd=node_dir, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, f"node {script} {' '.join(args)} failed:\n{r.stderr}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def node_enqueue(node_dir: Path, url: str, queue: str, *args: str) -> dict[str, Any]:
    (out,) = node(node_dir, "enqueue.js", "--redis", url, "--queue", queue, *args)
    return out


def node_worker(node_dir: Path, url: str, queue: str, *args: str) -> list[dict[str, Any]]:
    return node(node_dir, "worker.js", "--redis", url, "--queue", queue, "--once", *args)


def shell_enqueue(url: str, queue: str, *args: str, ok: bool = True) -> Any:
    r = subprocess.run(
        ["bash", str(SHELL_ENQUEUE), "--redis", url, "--queue", queue, *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if not ok:
        return r
    assert r.returncode == 0, f"enqueue.sh failed:\n{r.stderr}"
    return json.loads(r.stdout)


class Lines:
    """Reads a child's stdout lines on a thread, so a test can wait for one with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue_mod.Queue[str] = queue_mod.Queue()
        assert proc.stdout is not None
        out = proc.stdout
        self.thread = threading.Thread(target=lambda: [self.q.put(x) for x in out], daemon=True)
        self.thread.start()

    def next(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            return json.loads(self.q.get(timeout=timeout))  # type: ignore[no-any-return]
        except queue_mod.Empty:
            raise AssertionError("the Node worker printed nothing in 30 s") from None


@contextlib.contextmanager
def node_proc(node_dir: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], Lines]]:
    """A long-running `node` child with piped stdin/stdout; killed and reaped on exit."""
    with subprocess.Popen(
        ["node", *args], cwd=node_dir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        lines = Lines(proc)
        try:
            yield proc, lines
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            lines.thread.join(10)


async def run_python_worker(app: zsched.App, backend: Any) -> int:
    """One dispatcher pass and one Python worker pass; returns the runs the worker read."""
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    try:
        await d.tick()
        return int(await w.tick())
    finally:
        await d.close()
        await w.close()


async def dispatch(app: zsched.App, backend: Any) -> int:
    d = app.dispatcher(redis=backend.async_client())
    try:
        return int((await d.tick()).moved)
    finally:
        await d.close()


# -- Node -> Python ---------------------------------------------------------------------------


async def test_runs_enqueued_from_node_are_executed_by_a_python_worker(real, queue, node_dir):
    app = real.app(queue)
    seen = []

    @app.task(name="greet")
    def greet(payload):
        r = zsched.current_run()
        seen.append((payload, r.run_id, r.attempt, r.task))

    out = node_enqueue(node_dir, real.url, queue, "--task", "greet",
                       "--payload", json.dumps(PAYLOAD), "--run-id", "from-node-1")  # fmt: skip
    assert out == {"run_id": "from-node-1", "code": EnqueueCode.ENQUEUED, "duplicate": False}
    assert app.get_run("from-node-1").state == "scheduled"
    assert await run_python_worker(app, real) == 1
    assert seen == [(PAYLOAD, "from-node-1", 1, "greet")]
    assert app.get_run("from-node-1").state == "done"


async def test_runs_enqueued_from_the_shell_are_executed_by_a_python_worker(real, queue):
    app = real.app(queue)
    seen = []

    @app.task(name="greet")
    def greet(payload):
        seen.append((payload, zsched.current_run().run_id))

    out = shell_enqueue(real.url, queue, "--task", "greet", "--payload", json.dumps(PAYLOAD),
                        "--run-id", "from-shell-1")  # fmt: skip
    assert out == {"run_id": "from-shell-1", "code": EnqueueCode.ENQUEUED, "duplicate": False}
    assert envelope_of(real.sync, app.keys, "from-shell-1")[:1] == b"{"  # the JSON variant
    assert await run_python_worker(app, real) == 1
    assert seen == [(PAYLOAD, "from-shell-1")]


# -- Python -> Node ---------------------------------------------------------------------------


async def test_runs_enqueued_from_python_are_executed_by_the_node_worker(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("echo", PAYLOAD, run_id="from-python-1")
    assert await dispatch(app, real) == 1
    (out,) = node_worker(node_dir, real.url, queue)
    assert (out["run_id"], out["task"], out["attempt"], out["payload"]) == (
        "from-python-1", "echo", 1, PAYLOAD)  # fmt: skip
    assert (out["outcome"], out["written"]) == ("ack", True)
    assert app.get_run("from-python-1").state == "done"
    assert app.status().stats["acked"] == 1


@pytest.mark.parametrize("version", [1, 2])
async def test_a_node_retry_keeps_what_a_later_version_added(real, queue, node_dir, version):
    # docs/protocol.md: a rewriting worker keeps fields it does not know; the Node worker
    # writes a version 1 map back as a map, a version 2 array with its trailing elements.
    app = real.app(queue)
    if version == 1:
        raw = msgpack.packb({"v": 1, "run_id": "r", "task": "fail", "payload": 7,
                             "run_at_ms": 1, "future_field": "kept"})  # fmt: skip
    else:
        raw = msgpack.packb([2, "fail", 7, 1, 0, None, None, None, None, None, "kept"])
    app.scripts.run(S.enqueue(app.keys, [("r", 1, "fail", raw)], now_ms=None,
                              dedupe_window_ms=60_000, max_envelope_bytes=10_000))  # fmt: skip
    await dispatch(app, real)
    (out,) = node_worker(node_dir, real.url, queue, "--max-attempts", "3", "--retry-delay-ms", "0")
    assert (out["outcome"], out["written"]) == ("retry", True)
    again = msgpack.unpackb(envelope_of(real.sync, app.keys, "r"), raw=False)
    if version == 1:
        assert (again["v"], again["attempt"], again["future_field"]) == (1, 2, "kept")
    else:
        assert (again[0], again[6], again[-1]) == (2, 2, "kept")
    assert decode(envelope_of(real.sync, app.keys, "r"), "r").attempt == 2  # Python reads it too


async def test_the_node_worker_retries_then_dead_letters_through_the_scripts(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("fail", {"n": 1}, run_id="doomed")
    args = ("--max-attempts", "2", "--retry-delay-ms", "0")
    await dispatch(app, real)
    (first,) = node_worker(node_dir, real.url, queue, *args)
    assert (first["outcome"], first["written"], first["attempt"]) == ("retry", True, 1)
    run = app.get_run("doomed")
    assert (run.state, run.attempt) == ("scheduled", 2)
    await dispatch(app, real)
    (second,) = node_worker(node_dir, real.url, queue, *args)
    assert (second["outcome"], second["written"], second["attempt"]) == ("dead", True, 2)
    (letter,) = app.dead_letters()
    assert letter.run_id == "doomed"
    assert letter.reason == 'failed after 2 attempt(s): Error: boom: {"n":1}'
    assert app.get_run("doomed").state == "dead"
    # The dead letter is replayable by the Python side.
    assert app.replay_dead() == {"replayed": 1, "missing": 0, "live": 0, "undecodable": 0}


async def test_the_node_worker_dead_letters_bad_runs_with_the_python_reasons(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("nope", None, run_id="unknown-task")
    future = msgpack.packb({"v": 3, "run_id": "v2", "task": "echo", "run_at_ms": 1})
    app.scripts.run(S.enqueue(app.keys, [("v2", 0, "echo", future)], now_ms=None,
                              dedupe_window_ms=60_000, max_envelope_bytes=10_000))  # fmt: skip
    await dispatch(app, real)
    outs = {o["run_id"]: o for o in node_worker(node_dir, real.url, queue)}
    assert {rid: (o["outcome"], o["written"]) for rid, o in outs.items()} == {
        "unknown-task": ("dead", True), "v2": ("dead", True)}  # fmt: skip
    reasons = {d.run_id: (d.reason, d.envelope) for d in app.dead_letters()}
    assert reasons["unknown-task"][0] == "unknown task 'nope': not registered with this worker"
    assert reasons["v2"] == (
        "undecodable envelope: unknown protocol version 3 (this worker reads 1 and 2)",
        future,
    )


@pytest.mark.parametrize("taken_over", ["no", "held", "finished"])
async def test_the_node_worker_renews_its_hold_and_is_fenced_after_a_takeover(
    real, queue, node_dir, taken_over
):
    """held: the thief still holds the entry (ack code 0); finished: the thief acked it first
    (ack code 2, gone). Both are fences for the Node worker, which never sends twice."""
    app = real.app(queue)
    app.enqueue("hold", None, run_id="held")
    await dispatch(app, real)
    stolen = taken_over != "no"
    with node_proc(node_dir, "worker.js", "--redis", real.url, "--queue", queue, "--once") as (
        proc,
        lines,
    ):
        assert lines.next() == {"event": "started", "run_id": "held"}
        assert app.get_run("held").state == "running"
        if stolen:  # another consumer reclaims the entry while the Node handler runs
            r = app.scripts.run(S.reclaim(app.keys, "py-thief", now_ms=None, min_idle_ms=0,
                                          count=10, max_deliveries=5))  # fmt: skip
            assert [c.run_id for c in r.claimed] == ["held"]
            if taken_over == "finished":
                pair = [(r.claimed[0].entry_id, "held")]
                ack = S.ack(app.keys, "py-thief", pair, now_ms=None, dedupe_window_ms=60_000)
                assert app.scripts.run(ack) == [HoldCode.OK]
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert lines.next() == {"event": "renewed", "run_id": "held", "ok": not stolen}
        out = lines.next()
        assert (out["outcome"], out["written"]) == ("ack", not stolen)
        assert out["gone"] == (taken_over == "finished")
        assert proc.wait(30) == 0
    run = app.get_run("held")
    stats = app.status().stats
    if taken_over == "held":
        assert (run.state, run.consumer) == ("running", "py-thief")
        assert stats["fenced"] == 2  # the renew and the ack were refused
    elif taken_over == "finished":
        assert run.state == "done"
        assert (stats.get("fenced", 0), stats["gone"]) == (0, 2)  # the renew and the ack
    else:
        assert run.state == "done"


async def test_the_node_worker_loop_consumes_until_sigterm(real, queue, node_dir):
    app = real.app(queue)
    with node_proc(node_dir, "worker.js", "--redis", real.url, "--queue", queue) as (proc, lines):
        assert lines.next()["event"] == "ready"
        app.enqueue("echo", [1, 2], run_id="looped")
        await dispatch(app, real)
        out = lines.next()
        assert (out["run_id"], out["payload"], out["outcome"], out["written"]) == (
            "looped", [1, 2], "ack", True)  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert app.get_run("looped").state == "done"


def test_node_cancels_and_reads_the_state_of_python_runs(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("echo", None, delay=3600, run_id="later")
    base = ("--redis", real.url, "--queue", queue, "--run-id", "later")
    (shown,) = node(node_dir, "runs.js", "show", *base)
    assert (shown["state"], shown["task"], shown["attempt"]) == ("scheduled", "echo", 1)
    (cancelled,) = node(node_dir, "runs.js", "cancel", *base)
    assert cancelled["code"] == CancelCode.CANCELLED
    with pytest.raises(zsched.RunNotFound):
        app.get_run("later")
    (again,) = node(node_dir, "runs.js", "cancel", *base)
    assert again["code"] == CancelCode.NOT_FOUND


# -- dedupe and identical state ---------------------------------------------------------------


def enqueue_with(client: str, app: zsched.App, url: str, node_dir: Path, run_id: str,
                 payload: Any, when: dict[str, int]) -> int:  # fmt: skip
    """Enqueue task 'echo' from one client; returns the enqueue.lua code."""
    if client == "python":
        if "run_at_ms" in when:
            at = datetime.fromtimestamp(when["run_at_ms"] / 1000, tz=UTC)
            rid = app.enqueue("echo", payload, run_at=at, run_id=run_id)
        else:
            rid = app.enqueue("echo", payload, delay=when["delay_ms"] / 1000, run_id=run_id)
        if not rid.duplicate:
            return EnqueueCode.ENQUEUED
        # A duplicate changes nothing, so where the id is now says which kind it was.
        live = app.redis.hexists(app.keys.runs, run_id)
        return EnqueueCode.DUPLICATE_LIVE if live else EnqueueCode.DUPLICATE_DONE
    flag = "--run-at-ms" if "run_at_ms" in when else "--delay-ms"
    value = str(when.get("run_at_ms", when.get("delay_ms")))
    args = ("--task", "echo", "--payload", json.dumps(payload), "--run-id", run_id, flag, value)
    if client == "node":
        return int(node_enqueue(node_dir, url, app.queue, *args)["code"])
    return int(shell_enqueue(url, app.queue, *args)["code"])


CLIENTS = ("python", "node", "shell")


@pytest.mark.parametrize("first", CLIENTS)
async def test_dedupe_holds_across_languages(real, queue, node_dir, first):
    app = real.app(queue)
    ran = []

    @app.task(name="echo")
    def echo(payload):
        ran.append(payload)

    def enqueue(client: str) -> int:
        return enqueue_with(client, app, real.url, node_dir, "order-7", {"by": client},
                            {"delay_ms": 0})  # fmt: skip

    others = [c for c in CLIENTS if c != first]
    assert [enqueue(c) for c in [first, *others]] == [EnqueueCode.ENQUEUED] + [
        EnqueueCode.DUPLICATE_LIVE
    ] * 2
    assert delayed_count(real.sync, app.keys) == real.sync.hlen(app.keys.runs) == 1
    assert await run_python_worker(app, real) == 1
    assert ran == [{"by": first}]
    # Done within the dedupe window: a duplicate from every language, and nothing runs again.
    assert [enqueue(c) for c in CLIENTS] == [EnqueueCode.DUPLICATE_DONE] * 3
    assert await run_python_worker(app, real) == 0
    stats = app.status().stats
    assert (stats["enqueued"], stats["duplicate"], ran) == (1, 5, [{"by": first}])


def decode_any(raw: bytes) -> dict[str, Any]:
    """The envelope's fields as stored: JSON when the first byte is `{`, else msgpack (a
    version 2 array named by position, without the run id it does not carry)."""
    d = json.loads(raw) if raw[:1] == b"{" else msgpack.unpackb(raw, raw=False)
    if isinstance(d, list):
        d = v2_named(d)
    return d  # type: ignore[no-any-return]


def queue_state(r: Any, queue: str, ignore: set[str], scores: bool) -> dict[str, Any]:
    """Every key of the queue, by attribute name, with its type and decoded contents."""
    k = QueueKeys(queue)
    names = [
        f.name for f in dataclasses.fields(QueueKeys) if f.name not in ("queue", "partition", "tag")
    ]
    by_key = {getattr(k, name): name for name in names}
    out: dict[str, Any] = {}
    for raw_key in r.scan_iter(match=k.pattern()):
        key = raw_key.decode()
        if key.startswith(k.delayed_leaf("")):
            by_key[key] = "delayed_leaf"  # leaf numbers are the tree's, compared by contents
        assert key in by_key, f"unexpected key {key}"
        name, kind = by_key[key], r.type(key).decode()
        if name == "delayed_index":  # members carry the due time: compare how many leaves
            value: Any = r.zcard(key)
        elif kind == "zset":
            members = r.zrange(key, 0, -1, withscores=True)
            value = {m.decode(): (s if scores else None) for m, s in members}
        elif name == "runs":
            value = {}
            for rid, env in r.hgetall(key).items():
                due, bare = untag(env)
                assert due is not None, "a delayed run's value carries its due"
                fields = decode_any(bare)
                value[rid.decode()] = {f: v for f, v in fields.items() if f not in ignore}
        elif kind == "hash":
            value = {a.decode(): b.decode() for a, b in r.hgetall(key).items()}
        else:
            value = r.dump(key)
        out[name] = (kind, value)
    return out


@pytest.mark.parametrize("timing", ["run_at", "delay"])
def test_the_same_enqueue_from_python_node_and_shell_leaves_identical_state(
    real, queue, node_dir, timing
):
    run_at_ms = (int(datetime.now(UTC).timestamp()) + 86_400) * 1000
    when = {"run_at_ms": run_at_ms} if timing == "run_at" else {"delay_ms": 60_000}
    # Timestamps differ by client and by moment; with a relative delay so do the due times.
    # The shell writes a version 1 map (v 1, with the run id); Python and Node a version 2 array.
    ignore = {"enqueued_at_ms", "v", "run_id"}
    ignore |= {"run_at_ms", "scheduled_ms"} if timing == "delay" else set()
    states, raws = {}, {}
    for client in CLIENTS:
        app = real.app(f"{queue}-{client}")
        code = enqueue_with(client, app, real.url, node_dir, "same-run", PAYLOAD, when)
        assert code == EnqueueCode.ENQUEUED
        states[client] = queue_state(real.sync, app.queue, ignore, scores=timing == "run_at")
        raws[client] = envelope_of(real.sync, app.keys, "same-run")
    assert states["python"] == states["node"] == states["shell"]
    assert set(states["python"]) == {"delayed", "delayed_index", "delayed_leaf", "runs", "stats"}
    (env,) = states["python"]["runs"][1].values()
    assert env["payload"] == PAYLOAD
    # Every client leaves the fields at their default out (attempt 1, scheduled = run_at).
    assert "attempt" not in env and "scheduled_ms" not in env
    # Python and Node write the same version 2 array of 5; the shell the JSON version 1 map.
    py, node = (msgpack.unpackb(raws[c], raw=False) for c in ("python", "node"))
    assert (len(py), py[0], py[:4] if timing == "run_at" else py[:3]) == (
        5, 2, node[:4] if timing == "run_at" else node[:3])  # fmt: skip
    assert json.loads(raws["shell"])["v"] == 1 and json.loads(raws["shell"])["run_id"] == "same-run"
    if timing == "run_at":
        assert states["python"]["delayed_leaf"][1] == {"same-run": float(run_at_ms)}
        assert env["run_at_ms"] == run_at_ms


# -- script loading ---------------------------------------------------------------------------


def test_node_and_shell_fall_back_to_eval_when_the_script_is_not_cached(node_dir):
    sha = hashlib.sha1((ROOT / "lua" / "enqueue.lua").read_bytes()).hexdigest()
    with RedisServer() as srv:  # a fresh server: its script cache is empty
        app = zsched.App(srv.url, queue="fresh")
        try:
            for client, rid in (("node", "n1"), ("shell", "s1")):
                app.redis.script_flush()
                assert app.redis.script_exists(sha) == [False]
                code = enqueue_with(client, app, srv.url, node_dir, rid, None, {"delay_ms": 0})
                assert code == EnqueueCode.ENQUEUED
                assert app.redis.script_exists(sha) == [True]  # loaded again, same SHA
            assert set(delayed_ids(app.redis, app.keys)) == {"n1", "s1"}
        finally:
            app.close()


def test_the_shell_client_reports_a_refused_run_and_writes_nothing(real, queue):
    r = shell_enqueue(real.url, queue, "--task", "t" * 300, "--run-id", "long", ok=False)
    assert r.returncode == 1
    assert "ERR zsched enqueue: run long: task name is longer than 256 bytes" in r.stderr
    assert list(real.sync.scan_iter(match=QueueKeys(queue).pattern())) == []


def test_python_reads_a_node_envelope_as_the_same_envelope(real, queue, node_dir):
    args = ("--run-id", "n", "--run-at-ms", "1800000000000", "--max-attempts", "4")
    node_enqueue(
        node_dir, real.url, queue, "--task", "echo", "--payload", json.dumps(PAYLOAD), *args
    )
    env = decode(envelope_of(real.sync, QueueKeys(queue), "n"), "n")
    assert env == Envelope("n", "echo", PAYLOAD, 1_800_000_000_000, 1_800_000_000_000,
                           env.enqueued_at_ms, 1, None, 4)  # fmt: skip
    assert env.enqueued_at_ms > 0


# -- fresh run ids ----------------------------------------------------------------------------


def test_every_client_makes_fresh_ids_that_sort_by_time(real, queue, node_dir) -> None:
    app = real.app(queue)
    ids: dict[str, list[str]] = {}
    for client in CLIENTS:
        before = int(time.time() * 1000)
        made = []
        for _ in range(2):
            if client == "python":
                made.append(str(app.enqueue("echo", None, delay=60)))
            elif client == "node":
                made.append(node_enqueue(node_dir, real.url, queue, "--task", "echo")["run_id"])
            else:
                made.append(shell_enqueue(real.url, queue, "--task", "echo")["run_id"])
            time.sleep(0.002)  # the next id is in a later millisecond
        after = int(time.time() * 1000)
        assert all(re.fullmatch(r"[-0-9A-Za-z_]{20}", rid) for rid in made), made
        assert all(before <= created_ms(rid) <= after for rid in made), (made, before, after)
        assert made == sorted(made)
        ids[client] = made
    # One ordering across clients: each client's ids come after the previous client's.
    everything = ids["python"] + ids["node"] + ids["shell"]
    assert everything == sorted(everything)
    assert delayed_count(real.sync, app.keys) == 6


def test_node_reschedules_python_runs_with_the_same_outcomes(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("echo", None, delay=3600, run_id="later")
    base = ("--redis", real.url, "--queue", queue, "--run-id", "later")
    (moved,) = node(node_dir, "runs.js", "reschedule", *base, "--run-at-ms", "1900000000000")
    assert moved == {"run_id": "later", "code": 1, "outcome": "moved", "moved": True,
                     "due_ms": 1900000000000}  # fmt: skip
    assert app.get_run("later").run_at == datetime.fromtimestamp(1900000000, UTC)
    (soon,) = node(node_dir, "runs.js", "reschedule", *base, "--delay-ms", "0")
    assert soon["moved"] and app.reschedule("later", delay=60).moved
    base = ("--redis", real.url, "--queue", queue, "--run-id", "nobody")
    (missing,) = node(node_dir, "runs.js", "reschedule", *base, "--delay-ms", "5")
    assert (missing["outcome"], missing["moved"], missing["due_ms"]) == ("not_found", False, None)
    assert app.reschedule("nobody", delay=5).outcome.name.lower() == missing["outcome"]


def test_node_cancels_anywhere_with_the_python_outcomes(real, queue, node_dir):
    app = real.app(queue)
    app.enqueue("echo", None, delay=3600, run_id="later")
    base = ("--redis", real.url, "--queue", queue, "--run-id", "later")
    (first,) = node(node_dir, "runs.js", "cancel-run", *base)
    assert first == {"run_id": "later", "code": 1, "outcome": "cancelled_delayed"}
    assert app.get_run("later").state == "cancelled"
    (again,) = node(node_dir, "runs.js", "cancel-run", *base)
    assert again["outcome"] == "already_cancelled" == app.cancel("later").outcome.name.lower()


def test_node_cancelling_a_delayed_rule_fire_frees_its_lease(real, queue, node_dir):
    app = real.app(queue, clock=zsched.FakeClock(1_800_000_000_000))
    app.schedule("nightly", "echo", every=3600, overlap="skip")
    res = app.run_schedule_now("nightly")
    assert real.sync.get(app.keys.lease("nightly")) == res.run_id.encode()
    base = ("--redis", real.url, "--queue", queue, "--run-id", res.run_id)
    (out,) = node(node_dir, "runs.js", "cancel-run", *base)
    assert out["outcome"] == "cancelled_delayed"
    assert not real.sync.exists(app.keys.lease("nightly"))


async def test_the_node_worker_dead_letter_of_a_rule_fire_frees_its_lease_in_the_same_call(
    real, queue, node_dir
):
    """dead.lua's lease keys, as the Node worker passes them (issue 18): the lease is freed
    and the fire waiting for it starts, with no unlease call after the dead letter."""
    clock = zsched.FakeClock(1_800_000_000_000)
    app = real.app(queue, clock=clock)
    app.schedule("nightly", "fail", every=3600, overlap="queue")
    holder = app.run_schedule_now("nightly")
    clock.set(1_800_000_000_005)
    waiting = app.run_schedule_now("nightly")
    assert waiting.outcome is zsched.ManualOutcome.QUEUED
    await dispatch(app, real)
    (out,) = node_worker(node_dir, real.url, queue, "--max-attempts", "1")
    assert (out["outcome"], out["written"]) == ("dead", True)
    assert app.get_run(holder.run_id).state == "dead"
    k = app.keys
    assert real.sync.get(k.lease("nightly")) == waiting.run_id.encode()
    assert not real.sync.hexists(k.rule_waiting, "nightly")
    assert app.get_run(waiting.run_id).state == "scheduled"


async def test_the_node_worker_dead_letters_a_reclaimed_rule_fire_with_its_lease(
    real, queue, node_dir
):
    """reclaim.lua's hand_over form, as the Node worker passes it (issue 18): a rule's fire
    delivered more than max_deliveries (5) times comes back to the Node worker, whose dead
    letter frees the lease and starts the fire waiting for it."""
    clock = zsched.FakeClock(1_800_000_000_000)
    app = real.app(queue, clock=clock)
    app.schedule("nightly", "fail", every=3600, overlap="queue")
    holder = app.run_schedule_now("nightly")
    clock.set(1_800_000_000_005)
    waiting = app.run_schedule_now("nightly")
    assert waiting.outcome is zsched.ManualOutcome.QUEUED
    await dispatch(app, real)
    k, r = app.keys, real.sync
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    ((_, ((entry, _),)),) = r.xreadgroup(GROUP, "died", {k.ready: ">"})
    for _ in range(4):  # delivered 5 times to consumers that died (XCLAIM counts a delivery)
        r.xclaim(k.ready, GROUP, "died", 0, [entry])
    (out,) = node_worker(node_dir, real.url, queue, "--visibility-timeout-ms", "0")
    assert (out["run_id"], out["outcome"], out["written"]) == (holder.run_id, "dead", True)
    assert out["reason"] == "delivered 6 times without an ack (max_deliveries 5)"
    assert app.get_run(holder.run_id).state == "dead"
    assert r.get(k.lease("nightly")) == waiting.run_id.encode()
    assert not r.hexists(k.rule_waiting, "nightly")
    assert app.get_run(waiting.run_id).state == "scheduled"


@pytest.mark.parametrize("shape", ["plain", "tagged"])
async def test_the_node_client_and_worker_read_an_entry_in_either_shape(
    real, queue, node_dir, shape
):
    """An entry of `run_id`, `envelope`, `due_ms` (plain) or of `run_id` and `envelope` holding
    the run's tagged value (docs/protocol.md, "Keys"): `runs.js show` reads it as ready, the
    worker registers as a reader of both and runs it."""
    app = real.app(queue)
    r, k = real.sync, app.keys
    entry_shape.write(r, k, shape)
    app.enqueue("echo", PAYLOAD, run_id="value-1")
    assert await dispatch(app, real) == 1
    ((_, f),) = r.xrange(k.ready)
    tagged = untag(f[b"envelope"])[0] is not None
    assert (b"due_ms" in f, tagged) == ((False, True) if shape == "tagged" else (True, False))
    (shown,) = node(node_dir, "runs.js", "show", "--redis", real.url, "--queue", queue,
                    "--run-id", "value-1")  # fmt: skip
    assert (shown["state"], shown["task"], shown["attempt"]) == ("ready", "echo", 1)
    (out,) = node_worker(node_dir, real.url, queue)
    assert (out["run_id"], out["task"], out["payload"], out["outcome"]) == (
        "value-1", "echo", PAYLOAD, "ack")  # fmt: skip
    assert app.get_run("value-1").state == "done"
    assert list(r.hvals(k.readers)) == [b"plain,tagged"]


@pytest.mark.parametrize("before", ["nothing", "a 0.4 dispatch", "a 0.3 dispatch"])
def test_the_node_worker_that_makes_a_new_queues_group_marks_it_tagged(
    real, queue, node_dir, before
):
    """As the Python worker (zsched/worker/recovery.py, ensure_group): the first reader of a
    queue no 0.3 dispatcher moved runs of lets dispatchers write tagged entries; a queue a 0.3
    dispatcher moved runs of keeps plain (docs/operations.md, "Upgrading from zsched 0.3")."""
    app = real.app(queue)
    r, k = real.sync, app.keys
    moved_before = before == "a 0.3 dispatch"
    if before != "nothing":
        r.set(k.entries, "zsched 0.3+: ..." if moved_before else "zsched 0.4+: ...")
    assert node_worker(node_dir, real.url, queue) == []
    assert r.hget(k.control, "entries") == (None if moved_before else b"tagged")
    assert list(r.hvals(k.readers)) == [b"plain,tagged"]
    app.enqueue("echo", PAYLOAD, run_id="n-1")
    app.scripts.run(S.dispatch(k, now_ms=None, limit=10, max_backlog=0))
    ((_, f),) = r.xrange(k.ready)
    assert (b"due_ms" in f) == moved_before
