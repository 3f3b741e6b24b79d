"""The worker's own CPU per run, alone: `python -m bench.worker_cpu [--tree DIR ...]`.

A figure that load does not distort much (a rate does): N runs are enqueued and dispatched
onto the stream before the worker starts, then one worker process (CLI defaults unless
`--settings`) drains them; its user+sys CPU (getrusage of the whole process, threads
included) from before `run()` to the last outcome written, divided by N, and Redis's
commands, calls and CPU over the same span from INFO. `--tree` runs the worker from
another source tree (e.g. an export of main: `git archive main | tar -x -C /tmp/base`), the
trees interleaved round by round, so a before/after pair shares the machine's state.
`--profile FILE` writes the worker's cProfile stats (one round, one tree).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import asyncio, json, resource, sys, time
import zsched
from zsched.observability.metrics import Metrics

url, queue, n, handler, settings, profile = sys.argv[1:7]
n, settings = int(n), json.loads(settings)
app = zsched.App(url, queue=queue, metrics=Metrics())
seen = [0]
done = asyncio.Event()
kind, _, ms = handler.partition(":")
wait_s = float(ms) / 1000 if ms else 0.0

if kind == "sync":
    @app.task(name="noop")
    def noop_sync(payload):
        seen[0] += 1
        if wait_s:
            time.sleep(wait_s)
elif wait_s:
    @app.task(name="noop")
    async def io(payload):
        seen[0] += 1
        await asyncio.sleep(wait_s)
else:
    @app.task(name="noop")
    async def noop(payload):
        seen[0] += 1

async def main():
    w = app.worker(**settings)
    await w.setup()
    stop = asyncio.Event()
    acked = app.keys.stats

    async def watch():
        # In-process, no command: every run handled and its outcome written. (A Redis poll
        # here cost instructions in proportion to the wall time, which callgrind stretches.)
        wr = w.writer
        while True:
            await asyncio.sleep(0.01)
            if seen[0] >= n and not (wr.unwritten() or wr.flushing or w.runner.running):
                stop.set()
                return

    prof = None
    if profile != "-":
        import cProfile
        prof = cProfile.Profile()
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if prof:
        prof.enable()
    watcher = asyncio.create_task(watch())
    await w.run(stop)
    if prof:
        prof.disable()
        prof.dump_stats(profile)
    ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await watcher
    if int(await w.redis.hget(acked, "acked") or 0) < n:
        raise SystemExit("the worker stopped before every run was acknowledged")
    await w.close()
    print(json.dumps({"user": ru1.ru_utime - ru0.ru_utime, "sys": ru1.ru_stime - ru0.ru_stime,
                      "wall": t1 - t0, "seen": seen[0]}))

try:  # as `zsched worker` runs: uvloop where installed, unless ZSCHED_EVENT_LOOP says otherwise
    from zsched import eventloop
    from zsched.config import event_loop_from_env
except ImportError:  # a tree before zsched.eventloop
    asyncio.run(main())
else:
    eventloop.run(main(), event_loop_from_env())
"""


def _info(r) -> tuple[dict[str, int], float]:  # type: ignore[no-untyped-def]
    stats = r.info("commandstats")
    calls = {k[len("cmdstat_") :]: int(v["calls"]) for k, v in stats.items()}
    cpu = r.info("cpu")
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def one(url: str, tree: str, n: int, handler: str, settings: str, profile: str,
        spy: str = "", callgrind: bool = False) -> dict[str, float]:  # fmt: skip
    """Enqueue and dispatch `n` runs, then drain them with one worker from `tree`."""
    import asyncio

    import redis

    import zsched
    from zsched.observability.metrics import Metrics

    from .common import PAD

    q = f"wcpu-{uuid.uuid4().hex[:8]}"
    app = zsched.App(url, queue=q, metrics=Metrics())
    due = int(time.time() * 1000) - 1000
    for i in range(0, n, 1000):
        app.enqueue_many(
            {"task": "noop", "payload": {"at": due, "i": j, "pad": PAD}, "run_at": due / 1000}
            for j in range(i, min(n, i + 1000))
        )

    async def dispatch_all() -> None:
        d = app.dispatcher()
        while (await d.tick()).moved:
            pass
        await d.close()

    asyncio.run(dispatch_all())
    r = redis.Redis.from_url(url)
    if r.xlen(app.keys.ready) != n:
        raise RuntimeError(f"dispatched {r.xlen(app.keys.ready)} of {n}")
    calls0, rcpu0 = _info(r)
    env = {**os.environ, "PYTHONPATH": tree}
    cmd = [sys.executable, "-c", CHILD, url, q, str(n), handler, settings, profile]
    if spy:  # py-spy (not a dependency: give its path) records the child, collapsed stacks
        spy_bin, _, out_file = spy.partition(":")
        cmd = [spy_bin, "record", "-r", "400", "-f", "raw", "-o", out_file, "--", *cmd]
    cg = Path(tempfile.mkdtemp(prefix="wcpu-")) / "callgrind.out"
    if callgrind:  # every instruction of the child, whatever the load
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", *cmd]
    out = subprocess.run(
        cmd,
        cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    res = json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1])
    if callgrind:
        totals = [x for x in cg.read_text().splitlines() if x.startswith(("totals:", "summary:"))]
        res["instructions"] = int(totals[-1].split()[1])
        shutil.rmtree(cg.parent, ignore_errors=True)
    calls1, rcpu1 = _info(r)
    delta = {k: v - calls0.get(k, 0) for k, v in calls1.items() if v - calls0.get(k, 0)}
    delta.pop("info", None)
    r.delete(*[k for k in r.scan_iter(f"*{q}*")] or ["-"])
    app.close()
    r.close()
    return {
        "cpu_us_per_run": 1e6 * (res["user"] + res["sys"]) / n,
        "user_us_per_run": 1e6 * res["user"] / n,
        "sys_us_per_run": 1e6 * res["sys"] / n,
        "redis_cpu_us_per_run": 1e6 * (rcpu1 - rcpu0) / n,
        "commands_per_run": sum(delta.values()) / n,
        "calls": delta,
        "wall_s": res["wall"],
        "instructions": res.get("instructions", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--handler", default="", help='"" no-op, "async:2", "sync:2"')
    ap.add_argument("--settings", action="append",
                    help="JSON of WorkerSettings (default: the CLI's); repeat to compare")  # fmt: skip
    ap.add_argument("--tree", action="append", help="source tree(s) to run the worker from")
    ap.add_argument("--profile", default="-", help="cProfile output file (one round)")
    ap.add_argument("--spy", default="", help="PY_SPY_BINARY:OUT_FILE (collapsed stacks)")
    ap.add_argument("--callgrind", type=int, default=0, metavar="N0",
                    help="count the worker's instructions under callgrind instead: a drain of "
                         "N0 runs and one of N, (I(N) - I(N0)) / (N - N0) per run")  # fmt: skip
    a = ap.parse_args()
    from .common import server

    trees = a.tree or [str(HERE.parent)]
    runs = [(t, st) for t in trees for st in a.settings or ["{}"]]
    got: dict[tuple[str, str], list[dict[str, float]]] = {r: [] for r in runs}
    with server() as srv:
        for rnd in range(a.rounds):
            for t, st in runs if rnd % 2 == 0 else runs[::-1]:
                row = one(srv.url, t, a.n, a.handler, st, a.profile, a.spy, bool(a.callgrind))
                if a.callgrind:
                    base = one(srv.url, t, a.callgrind, a.handler, st, "-", "", True)
                    per_run = (row["instructions"] - base["instructions"]) / (a.n - a.callgrind)
                    row["cpu_us_per_run"] = per_run / 1000  # shown as k instructions per run
                    print(
                        f"round {rnd} {t} {st}: {per_run / 1000:.1f} k instructions per run "
                        f"(setup and {a.callgrind} runs {base['instructions'] / 1e6:.0f} M)"
                    )
                got[t, st].append(row)
                calls = " ".join(f"{k} {v / a.n:.3f}" for k, v in sorted(row["calls"].items()))
                print(f"round {rnd} {t} {st}: worker CPU {row['cpu_us_per_run']:.1f} us/run "
                      f"(user {row['user_us_per_run']:.1f}, sys {row['sys_us_per_run']:.1f}), "
                      f"Redis {row['redis_cpu_us_per_run']:.1f} us/run, "
                      f"{row['commands_per_run']:.3f} commands/run [{calls}], "
                      f"wall {row['wall_s']:.2f}s", flush=True)  # fmt: skip
    for t, rows in got.items():
        med = statistics.median(r["cpu_us_per_run"] for r in rows)
        each = "/".join(f"{r['cpu_us_per_run']:.1f}" for r in rows)
        cmd = statistics.median(r["commands_per_run"] for r in rows)
        trips = {c: statistics.median(r["calls"].get(c, 0) / a.n for r in rows)
                 for c in ("xreadgroup", "evalsha")}  # fmt: skip
        rcpu = statistics.median(r["redis_cpu_us_per_run"] for r in rows)
        print(f"{t[0]} {t[1]}: median worker CPU {med:.1f} us/run ({each}); Redis CPU "
              f"{rcpu:.1f} us/run, commands/run {cmd:.3f}; XREADGROUP "
              f"{trips['xreadgroup']:.4f}, EVALSHA {trips['evalsha']:.4f} per run")  # fmt: skip


if __name__ == "__main__":
    main()
