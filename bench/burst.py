"""The burst tail: `python -m bench.burst [--n 200000] [--fifo] [--bursts K]`.

`n` runs due at one instant; one dispatcher process and two worker processes run at the same
time (dispatch and acks interleave in Redis), redis-server pinned to CPU 1 with taskset and
the three clients to CPU 0, the slow log at 1 ms. `--bursts K` sends K bursts, each after
the last drained, to the same processes: a later one meets a long-running dispatcher.
Printed: every script call over 1 ms
(script, duration, and a dispatch call's limit), Redis's own time per call of each script
from INFO commandstats, and how long redis-server waited for a CPU while runnable
(/proc/<pid>/schedstat, field 2): time another process held its core. `--fifo` runs
redis-server under SCHED_FIFO (chrt -f 10) so no ordinary process can preempt it: a slow call
that remains then is Redis's own work (rehashing, Lua GC, allocation), one that vanishes was
time off the CPU. Bounded: `--timeout` seconds for the drain.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from zsched.store import scripts as S

from .common import ROOT, Proc, client, now_ms, payload, server, wait_ready
from .contender import py_module

SLOW_US = 1000


def _dispatch_limit(words: list[bytes]) -> str:
    """A dispatch call's limit: `EVALSHA sha numkeys keys... now_ms limit ...`."""
    at = 4 + int(words[2])
    return words[at].decode() if len(words) > at else "-"


def _run_delay_ms(pid: int) -> float:
    """ms that `pid` spent runnable but waiting for a CPU, so far."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e6


def _slow(r: Any) -> list[tuple[str, float, str, int]]:
    names = {hashlib.sha1(S.source(n).encode()).hexdigest().encode(): n for n in S.NAMES}
    out = []
    for e in r.slowlog_get(10_000):
        words = e["command"].split(b" ")
        if words[0].upper() not in (b"EVALSHA", b"EVAL"):
            out.append((words[0].decode(), e["duration"] / 1000, "-", e["start_time"]))
            continue
        name = names.get(words[1], "?")
        limit = _dispatch_limit(words) if name == "dispatch" else "-"
        out.append((name, e["duration"] / 1000, limit, e["start_time"]))
    return sorted(out, key=lambda x: x[3])


def _proc(role: str, url: str, q: str, settings: dict[str, Any]) -> Proc:
    argv = py_module("bench.zsched_proc", role, "--url", url, "--queue", q,
                     "--settings", json.dumps(settings))  # fmt: skip
    return Proc(["taskset", "-c", "0", *argv], cwd=str(ROOT))


def _enqueue(app: Any, n: int, due: int) -> float:
    """`n` runs due at `due` (ms), in batches; seconds it took."""
    t = time.monotonic()
    for start in range(0, n, 10_000):
        app.enqueue_many({"task": "noop", "payload": payload(due, start + i),
                          "run_at": due / 1000} for i in range(min(10_000, n - start)))  # fmt: skip
    return time.monotonic() - t


def _drain(r: Any, app: Any, pid: int, acked_goal: int, due: int,
           timeout: float) -> tuple[float, float, int]:  # fmt: skip
    """Wait for `due`, then until `acked_goal` runs are acked: (wall s, ms redis-server waited
    for a CPU while runnable, acked)."""
    time.sleep(max(0.0, (due - now_ms()) / 1000))
    d0, t0 = _run_delay_ms(pid), time.time()
    deadline = time.monotonic() + timeout
    while int(r.hget(app.keys.stats, "acked") or 0) < acked_goal and time.monotonic() < deadline:
        time.sleep(0.05)
    return time.time() - t0, _run_delay_ms(pid) - d0, int(r.hget(app.keys.stats, "acked") or 0)


def _report(k: int, n: int, acked: int, wall: float, waited: float, fifo: bool,
            slow: list[tuple[str, float, str, int]], stats: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    what = "a fresh dispatcher" if k == 0 else "the same dispatcher, long running"
    print(f"burst {k + 1} ({what}): {n} runs, {acked} acked in {wall:.1f} s "
          f"({acked / wall:,.0f} runs/s), fifo={fifo}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"redis-server waited {waited:.0f} ms for a CPU while runnable during the drain")
    es = stats.get("cmdstat_evalsha", {})
    print(f"EVALSHA: {es.get('calls')} calls, {es.get('usec_per_call')} us per call on average")
    over5 = [s for s in slow if s[1] > 5]
    print(f"calls over 1 ms: {len(slow)}, over 5 ms: {len(over5)}")
    # The slowest ten, then each dispatch call over 1 ms that was not of a full size (the
    # first calls of a burst, sized while Redis was idle).
    for name, ms, limit, _t in sorted(slow, key=lambda x: -x[1])[:10]:
        print(f"  {name:<10} {ms:6.2f} ms  limit {limit}")
    sizes = [int(x[2]) for x in slow if x[0] == "dispatch" and x[2].isdigit()]
    if sizes:
        print(f"  dispatch calls over 1 ms by limit: {dict(sorted(Counter(sizes).items()))}")
    return {"burst": k + 1, "n": n, "acked": acked, "wall_s": wall, "run_delay_ms": waited,
            "fifo": fifo, "slow": slow, "over_5ms": len(over5)}  # fmt: skip


def burst(n: int, fifo: bool, timeout: float, bursts: int = 1) -> list[dict[str, Any]]:
    """`bursts` bursts of `n` runs each, one after the other drained, on the same processes:
    the second and later ones meet a dispatcher whose call size grew in the first."""
    import zsched
    from zsched.observability.metrics import Metrics

    out: list[dict[str, Any]] = []
    with server("--slowlog-log-slower-than", str(SLOW_US), "--slowlog-max-len", "10000") as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        subprocess.run(["taskset", "-pc", "1", str(pid)], check=True, capture_output=True)
        if fifo:
            subprocess.run(["chrt", "-f", "-p", "10", str(pid)], check=True)
        q = "s" + uuid.uuid4().hex[:8]
        app = zsched.App(srv.url, queue=q, metrics=Metrics())
        r = client(srv.url)
        procs: list[Proc] = []
        try:
            took = 1.0
            for k in range(bursts):
                due = now_ms() + 3000 + int(2000 * took)  # all enqueued before it is due
                took = _enqueue(app, n, due)
                r.slowlog_reset()
                r.config_resetstat()
                if not procs:
                    procs = [_proc("dispatcher", srv.url, q, {})]
                    procs += [_proc("worker", srv.url, q, {"concurrency": 1000, "read_batch": 500})
                              for _ in range(2)]  # fmt: skip
                    for p in procs:
                        p.start()
                    wait_ready(procs, 30)
                wall, waited, acked = _drain(r, app, pid, n * (k + 1), due, timeout)
                out.append(_report(k, n, acked - n * k, wall, waited, fifo, _slow(r),
                                   r.info("commandstats")))  # fmt: skip
        finally:
            for p in procs:
                p.stop()
            r.close()
            app.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.burst")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--fifo", action="store_true", help="redis-server under SCHED_FIFO")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument(
        "--bursts",
        type=int,
        default=1,
        help="bursts one after the other on the same processes (default 1)",
    )
    a = ap.parse_args()
    burst(a.n, a.fifo, a.timeout, a.bursts)


if __name__ == "__main__":
    main()
