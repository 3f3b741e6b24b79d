"""The console's cost (issue 22): server-side render time of its pages and the Redis time of
each page's reads, with 1,000,000 delayed runs and 1,000 rules in one queue, first idle and
then while a dispatcher and a worker drain runs.

    .venv/bin/python -m bench.console [--runs N] [--rules N] [--views N]

Render time is the wall time of one GET through Starlette's TestClient in this process, on
one event loop (request parsing, the handler, its Redis round trips on the sync App in the
thread pool or on the AsyncApp, Jinja rendering), median and p95 over
`--views` views. Redis time is what the slow log records (`slowlog-log-slower-than 0`) for
the commands of one view: their sum, the longest single command, and their count.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

import zsched
from zsched.observability.metrics import Metrics

from .common import ROOT, RedisServer, percentile

TASKS = [f"task{i}" for i in range(10)]
#: The client name of the console's connection, to pick its commands out of the slow log.
CLIENT = "console-bench"
APP_MODULE = """
import os, zsched
app = zsched.App(os.environ["ZSCHED_REDIS_URL"], queue="console")
for name in {tasks!r} + ["rare", "rule_task"]:
    app.task(name=name)(lambda payload: None)
"""


def fill(app: zsched.App, runs: int, rules: int) -> None:
    now = time.time()
    chunk = 10_000
    for start in range(0, runs, chunk):
        app.enqueue_many([{"task": TASKS[i % 10], "payload": {"i": i, "pad": "x" * 64},
                           "run_at": now + 3600 + i * 2.5, "run_id": f"run-{i:07d}"}
                          for i in range(start, min(runs, start + chunk))])  # fmt: skip
    app.enqueue("rare", None, run_at=now + 3600 + runs * 2.5, run_id="rare-one")
    for i in range(rules):
        if i % 2:
            app.schedule(f"rule-{i:04d}", "rule_task", cron=f"{i % 60} * * * *", tz="Europe/Berlin")
        else:
            app.schedule(f"rule-{i:04d}", "rule_task", every=60 + i)


def views(client: Any, r: redis.Redis, path: str, n: int) -> dict[str, float]:
    """Render `path` n times; wall ms per view and the slow log's Redis µs per view."""
    walls, sums, maxes, counts = [], [], [], []
    for _ in range(n):
        r.slowlog_reset()
        t0 = time.perf_counter()
        resp = client.get(path, headers={"Authorization": "Bearer bench"})
        walls.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:300])
        # Only the console's own connection (the dispatcher and worker write here too).
        log = [
            e for e in r.slowlog_get(100_000) if e.get("client_name") in (CLIENT, CLIENT.encode())
        ]
        sums.append(sum(int(e["duration"]) for e in log))
        maxes.append(max((int(e["duration"]) for e in log), default=0))
        counts.append(len(log))
    return {"wall_p50_ms": percentile(walls, 50), "wall_p95_ms": percentile(walls, 95),
            "redis_us_p50": percentile(sums, 50), "redis_max_cmd_us": max(maxes),
            "commands": percentile(counts, 50)}  # fmt: skip


def pages(cursor_mid: str, mid_id: str) -> list[tuple[str, str]]:
    q = "console"
    return [("overview", "/"), ("overview JSON (live refresh)", "/api/overview"),
            ("delayed runs, first page", f"/q/{q}/runs"),
            ("delayed runs, a page in the middle", f"/q/{q}/runs?cursor={cursor_mid}"),
            ("delayed runs, filtered by a rare task", f"/q/{q}/runs?task=rare"),
            ("rules, first page", f"/q/{q}/rules"), ("one rule", f"/q/{q}/rule?id=rule-0001"),
            ("one run", f"/q/{q}/run?id={mid_id}")]  # fmt: skip


def measure(client: Any, r: redis.Redis, n: int, label: str, runs: int) -> None:
    from zsched.web.reads import encode_cursor

    mid_id = f"run-{runs // 2:07d}"
    mid = zsched.App(r, queue="console").get_run(mid_id).run_at
    assert mid is not None
    cursor = encode_cursor(int(mid.timestamp() * 1000), mid_id)
    print(f"\n{label}")
    print(
        f"{'page':<40} {'render p50':>11} {'p95':>8} {'Redis/view':>11} {'max cmd':>8} {'cmds':>5}"
    )
    for name, path in pages(cursor, mid_id):
        m = views(client, r, path, n)
        print(f"{name:<40} {m['wall_p50_ms']:>9.1f}ms {m['wall_p95_ms']:>6.1f}ms "
              f"{m['redis_us_p50'] / 1000:>9.2f}ms {m['redis_max_cmd_us'] / 1000:>6.2f}ms "
              f"{m['commands']:>5.0f}")  # fmt: skip


def drain_processes(url: str, tmp: Path) -> list[subprocess.Popen[bytes]]:
    (tmp / "console_bench_app.py").write_text(APP_MODULE.format(tasks=TASKS))
    env = {**os.environ, "ZSCHED_REDIS_URL": url, "PYTHONPATH": f"{tmp}{os.pathsep}{ROOT}"}
    cmd = [sys.executable, "-m", "zsched"]
    return [subprocess.Popen([*cmd, "dispatcher", "--queue", "console"], env=env, cwd=tmp),
            subprocess.Popen([*cmd, "worker", "console_bench_app:app", "--queue", "console"],
                             env=env, cwd=tmp)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--rules", type=int, default=1_000)
    ap.add_argument("--views", type=int, default=20)
    ap.add_argument("--drain", type=int, default=200_000, help="runs due now for the drain phase")
    args = ap.parse_args()
    from starlette.testclient import TestClient

    from zsched.web import create_app

    with RedisServer("--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000") as srv:
        r = redis.Redis.from_url(srv.url, protocol=2)
        app = zsched.App(srv.url, queue="console", metrics=Metrics())
        t0 = time.perf_counter()
        fill(app, args.runs, args.rules)
        print(f"filled {args.runs:,} delayed runs and {args.rules:,} rules in "
              f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
        own = redis.Redis.from_url(srv.url, protocol=2, client_name=CLIENT)
        web_app = zsched.App(own, queue="console", metrics=Metrics())
        # One event loop for every view, as under a real server (a TestClient outside `with`
        # starts a loop, and so the console's asyncio client, per request).
        with TestClient(create_app(web_app, environ={"ZSCHED_WEB_TOKEN": "bench"})) as client:
            measure(client, r, args.views, "idle (no dispatcher, no worker)", args.runs)
            now = time.time()
            app.enqueue_many([{"task": TASKS[i % 10], "payload": {"i": i}, "run_at": now - 1,
                               "run_id": f"due-{i:07d}"} for i in range(args.drain)])  # fmt: skip
            with tempfile.TemporaryDirectory() as tmp:
                procs = drain_processes(srv.url, Path(tmp))
                try:
                    while zsched.App(r, queue="console").status().stats.get("acked", 0) < 1000:
                        time.sleep(0.05)  # until the drain is under way
                    label = f"while a dispatcher and a worker drain {args.drain:,} due runs"
                    measure(client, r, args.views, label, args.runs)
                    acked = zsched.App(r, queue="console").status().stats.get("acked", 0)
                    print(f"(acked {acked:,} runs by the end of the measurement)")
                finally:
                    for p in procs:
                        p.terminate()
                    for p in procs:
                        p.wait(30)


if __name__ == "__main__":
    main()
