"""Redis's instructions per run, under valgrind's callgrind: `python -m bench.instructions`.

A noise-free measure for a shared machine: redis-server runs under callgrind (`--hz 1`, so its
cron adds little), the counters are zeroed before each phase and dumped after it
(`callgrind_control`), and a phase's instructions are divided by its runs. Phases: one-call
enqueue, batched enqueue (1,000 a call), then dispatch, XREADGROUP and ack of due runs, each
beside the bare floor's same operations (bench/peers/bare.py); ready entries are tagged, or
plain with `--plain` (docs/operations.md, "Upgrading from zsched 0.3"). `--lua DIR` loads enqueue,
dispatch and ack from DIR instead (an older tree, to compare). Instructions leave out the
kernel's share (socket reads and writes), so ratios are larger than in CPU time.
BENCHMARKS.md, "Redis's cost per run".
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import redis

from zsched.store.delayed import tag

from .common import RedisServer, now_ms, payload
from .cost import _calls

FLOOR = ("bare:{q}:delayed", "bare:{q}:runs", "bare:{q}:ready")


@contextmanager
def callgrind_server(out: str) -> Iterator[tuple[redis.Redis, Callable[[], tuple[int, int]]]]:
    """A redis-server under callgrind; yields a client and `cost()`: (instructions, commands)
    since the last call (the first call only starts counting)."""
    srv = RedisServer("--hz", "1")
    exe = shutil.which("redis-server") or "redis-server"
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p.out", exe,
            "--port", str(srv.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", srv.dir, "--hz", "1"]  # fmt: skip
    srv.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv.wait_ready(60)
    r = redis.Redis(port=srv.port, protocol=2)
    pid = str(srv.proc.pid)
    last = [_calls(r)]

    def cost() -> tuple[int, int]:
        subprocess.run(["callgrind_control", "-d", pid], capture_output=True, check=False)
        files = sorted(glob.glob(f"{out}/cg.{pid}.out.*"), key=os.path.getmtime)
        ir = 0
        for line in Path(files[-1]).read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                ir = int(line.split()[1])
        calls, last[0] = _calls(r) - last[0], _calls(r)
        return ir, calls

    try:
        yield r, cost
    finally:
        r.close()
        srv.stop()
        shutil.rmtree(srv.dir, ignore_errors=True)


def _row(label: str, n: int, c: tuple[int, int]) -> dict[str, Any]:
    ir, calls = c
    print(f"{label:<24} {ir / n:>10,.0f} instructions/run  {calls / n:6.2f} commands/run")
    return {"phase": label, "instructions_per_run": ir / n, "commands_per_run": calls / n}


def floor_enqueue(r: redis.Redis, runs: Iterable[tuple[int, dict[str, Any]]]) -> None:
    """The floor's enqueue of `runs` (due_ms, payload): one pipeline of HSET + ZADD a run, as
    bench/peers/bare.py sends it."""
    pipe = r.pipeline(transaction=False)
    for at, p in runs:
        rid = uuid.uuid4().hex
        pipe.hset(FLOOR[1], rid, msgpack.packb(p))
        pipe.zadd(FLOOR[0], {rid: at})
    pipe.execute()


def _enqueue(
    r: redis.Redis, cost: Callable[[], tuple[int, int]], sha: str, n: int, untagged: bool = False
) -> list[Any]:
    from zsched.protocol.envelope import Envelope
    from zsched.protocol.keys import QueueKeys

    k = QueueKeys("i")
    keys = [k.delayed, k.runs, k.done, k.stats, k.wake]
    due = now_ms() + 3_600_000

    def env(i: int) -> bytes:
        return Envelope(uuid.uuid4().hex, "noop", payload(due + i, i), due, due, due).encode()

    def tagged(at: int, e: bytes) -> bytes:
        # As the Python and Node clients send an epoch-ms run (docs/protocol.md, enqueue.lua);
        # `--lua` of a tree before 867c5d6 needs `--untagged`.
        return e if untagged else tag(at, e)

    rows = []
    cost()
    for i in range(n):
        r.evalsha(sha, 5, *keys, "", 86_400_000, 1 << 20, uuid.uuid4().hex, due + i, "noop",
                  tagged(due + i, env(i)))  # fmt: skip
    rows.append(_row("enqueue one-call", n, cost()))
    for i in range(n):
        floor_enqueue(r, [(due + i, payload(due + i, i))])
    rows.append(_row("floor one-call", n, cost()))
    m = 5 * n
    for s in range(0, m, 1000):
        args: list[Any] = []
        for i in range(s, min(m, s + 1000)):
            args += [uuid.uuid4().hex, due + n + i, "noop", tagged(due + n + i, env(i))]
        r.evalsha(sha, 5, *keys, "", 86_400_000, 1 << 20, *args)
    rows.append(_row("enqueue batched", m, cost()))
    for s in range(0, m, 1000):
        floor_enqueue(r, [(due + n + i, payload(due + i, i)) for i in range(s, min(m, s + 1000))])
    rows.append(_row("floor batched", m, cost()))
    return rows


def _drain(r: redis.Redis, cost: Callable[[], tuple[int, int]], shas: dict[str, str], n: int,
           batch: int, limit: int, shape: str = "tagged") -> list[Any]:  # fmt: skip
    from zsched.protocol.keys import GROUP, QueueKeys
    from zsched.runs import entry_shape
    from zsched.store import scripts as S

    from .peers.bare import DISPATCH

    k, rows = QueueKeys("d"), []
    due = now_ms() - 1000
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        rid = uuid.uuid4().hex[:16]
        item = S.enqueue(k, [(rid, due, "noop", msgpack.packb(payload(due, i)))], now_ms=None,
                         dedupe_window_ms=86_400_000, max_envelope_bytes=1 << 20)  # fmt: skip
        pipe.evalsha(shas["enqueue"], len(item.keys), *item.keys, *item.args)
        pipe.hset(FLOOR[1], rid, msgpack.packb(payload(due, i)))
        pipe.zadd(FLOOR[0], {rid: due})
    pipe.execute()
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    # The entry shape, as the 0.4 worker that makes a new queue's group chooses it (tagged),
    # or as a queue of 0.3 keeps it (--plain).
    entry_shape.write(r, k, shape)
    r.xgroup_create(FLOOR[2], "g", id="0", mkstream=True)
    floor = r.script_load(DISPATCH)
    cost()
    d = S.dispatch(k, now_ms=None, limit=limit, max_backlog=0)
    while int(r.evalsha(shas["dispatch"], len(d.keys), *d.keys, *d.args)[0]) > 0:
        pass
    rows.append(_row(f"dispatch {limit} a call", n, cost()))
    got = []
    for _ in range(n // batch):
        resp: Any = r.xreadgroup(GROUP, "c", {k.ready: ">"}, count=batch)
        got.append([(e.decode(), f[b"run_id"].decode()) for _s, es in resp for e, f in es])
    rows.append(_row(f"XREADGROUP {batch}", n, cost()))
    for pairs in got:
        a = S.ack(k, "c", pairs, now_ms=None, dedupe_window_ms=86_400_000)
        r.evalsha(shas["ack"], len(a.keys), *a.keys, *a.args)
    rows.append(_row(f"ack {batch} a call", n, cost()))
    while int(r.evalsha(floor, 3, *FLOOR, now_ms(), batch)[0]) > 0:
        pass
    rows.append(_row(f"floor dispatch {batch}", n, cost()))
    ids = []
    for _ in range(n // batch):
        resp = r.xreadgroup("g", "c", {FLOOR[2]: ">"}, count=batch)
        ids.append([e for _s, es in resp for e, _f in es])
    rows.append(_row(f"floor XREADGROUP {batch}", n, cost()))
    for b in ids:
        r.xack(FLOOR[2], "g", *b)
    rows.append(_row(f"floor XACK {batch}", n, cost()))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lua", default=None, help="load enqueue/dispatch/ack.lua from this folder")
    ap.add_argument("--one", type=int, default=300, help="one-call enqueues (batched: 5x)")
    ap.add_argument("--drain", type=int, default=5000, help="due runs drained")
    ap.add_argument("--batch", type=int, default=50, help="read and ack batch")
    ap.add_argument("--limit", type=int, default=500, help="runs per dispatch call")
    ap.add_argument("--plain", action="store_true",
                    help="dispatch plain ready entries (a queue of zsched 0.3), not tagged")  # fmt: skip
    ap.add_argument("--untagged", action="store_true",
                    help="enqueue envelopes without their due tag (a client before 867c5d6)")  # fmt: skip
    a = ap.parse_args()
    from zsched.store import scripts as S

    lua = Path(a.lua) if a.lua else S.lua_dir()
    with (
        tempfile.TemporaryDirectory(prefix="zsched-cg-") as out,
        callgrind_server(out) as (r, cost),
    ):
        shas = {name: r.script_load((lua / f"{name}.lua").read_text())
                for name in ("enqueue", "dispatch", "ack")}  # fmt: skip
        _enqueue(r, cost, shas["enqueue"], a.one, a.untagged)
        _drain(r, cost, shas, a.drain, a.batch, a.limit, "plain" if a.plain else "tagged")


if __name__ == "__main__":
    main()
