"""`make soak`: a steady load for minutes; lag over time, Redis memory, process RSS.

    python tests/chaos/soak.py [--seconds 600] [--rate 5000] [--window-ms 10000]

One dispatcher (`zsched dispatcher`) and two workers (soak_proc) on a private redis-server
(appendonly yes, appendfsync everysec). Each run is enqueued due one second later. Reported:
lag (handler start - intended time) p50/p99 per window, Redis used_memory before the load,
its peak during it, and after the drain plus one dedupe window (completion records expire),
and each process's RSS per window. Results go to --out (JSON and a Markdown table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
from redis_server import RedisServer  # noqa: E402

import zsched  # noqa: E402

QUEUE = "soak"


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Enqueuer(threading.Thread):
    """`rate` runs a second in batches every 50 ms, each due one second after its enqueue."""

    def __init__(self, url: str, rate: int, window_ms: int) -> None:
        super().__init__(daemon=True)
        settings = zsched.QueueSettings(dedupe_window_ms=window_ms)
        self.app = zsched.App(url, queue=QUEUE, settings=settings)
        self.rate, self.sent, self.stop = rate, 0, threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int(self.rate * (time.monotonic() - start)) - self.sent
            if due > 0:
                n = min(due, 2000)
                self.app.enqueue_many([{"task": "soak", "delay": 1.0} for _ in range(n)])
                self.sent += n
            else:
                time.sleep(0.05)


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return float(s[min(len(s) - 1, int(q * len(s)))])


class Soak:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.out: Path = a.out or Path(tempfile.mkdtemp(prefix="zsched-soak-"))
        (self.out / "redis").mkdir(parents=True, exist_ok=True)
        self.srv = RedisServer(
            "--appendonly", "yes", "--appendfsync", "everysec", dir=str(self.out / "redis")
        ).start()
        self.r = redis.Redis.from_url(self.srv.url)
        self.keys = zsched.App(self.r, queue=QUEUE).keys
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.samples: list[dict[str, Any]] = []
        self.offsets: dict[str, int] = {}

    def spawn(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
        cmds = {
            "dispatcher": [
                "-m",
                "zsched",
                "dispatcher",
                "--redis",
                self.srv.url,
                "--queue",
                QUEUE,
                "--batch-size",
                "1000",
            ]
        }
        for i in range(self.a.workers):
            cmds[f"worker-{i}"] = [
                "-m",
                "soak_proc",
                self.srv.url,
                QUEUE,
                str(self.a.window_ms),
                str(self.out / f"worker-{i}.jsonl"),
            ]
        for name, args in cmds.items():
            with open(self.out / f"{name}.log", "wb") as f:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, *args],
                    cwd=self.out,
                    env=env,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                )

    def sample(self, phase: str, t0: float) -> dict[str, Any]:
        p = self.r.pipeline(transaction=False)
        p.info("memory")
        p.hget(self.keys.delayed, "n")
        p.xlen(self.keys.ready)
        p.zcard(self.keys.done)
        mem, delayed, ready, done = p.execute()
        n, lags = 0, []
        for name in self.procs:
            path = self.out / f"{name}.jsonl"
            if not path.exists():
                continue
            with open(path) as f:
                f.seek(self.offsets.get(name, 0))
                chunk = f.read()
                complete = chunk[: chunk.rfind("\n") + 1]
                self.offsets[name] = self.offsets.get(name, 0) + len(complete)
            for line in complete.splitlines():
                d = json.loads(line)
                n += d["n"]
                lags += d["lags"]
        s = {
            "t": round(time.monotonic() - t0, 1),
            "phase": phase,
            "used_mb": mem["used_memory"] / 2**20,
            "delayed": delayed,
            "ready": ready,
            "done": done,
            "executed": n,
            "lags": lags,
            "rss": {k: rss_mb(v.pid) for k, v in self.procs.items()},
            # The machine's 1-minute load: a lag spike on a shared host is often someone else.
            "load": os.getloadavg()[0],
        }
        self.samples.append(s)
        return s

    def run(self) -> dict[str, Any]:
        a = self.a
        self.spawn()
        t0 = time.monotonic()
        while (
            self.r.pubsub_numsub(self.keys.wake)[0][1] < 1
            or sum(1 for c in self.r.client_list() if c.get("cmd") == "xreadgroup") < a.workers
        ):
            time.sleep(0.1)
        time.sleep(2)  # let the processes settle before the baseline
        base = self.sample("before", t0)
        load = Enqueuer(self.srv.url, a.rate, a.window_ms)
        load.start()
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            time.sleep(1)
            self.sample("load", t0)
        load.stop.set()
        load.join()
        drain_start = time.monotonic()
        while True:
            s = self.sample("drain", t0)
            pending = self.r.xpending(self.keys.ready, "workers")["pending"]
            if s["delayed"] == 0 and s["ready"] == 0 and pending == 0:
                break
            time.sleep(1)
        drain_s = time.monotonic() - drain_start
        expire_by = time.monotonic() + a.window_ms / 1000 + 5
        while time.monotonic() < expire_by and self.r.exists(self.keys.done):
            time.sleep(1)
            self.sample("expire", t0)
        time.sleep(1)
        after = self.sample("after", t0)
        executed = sum(s["executed"] for s in self.samples)
        return {
            "rate": a.rate,
            "seconds": a.seconds,
            "workers": a.workers,
            "window_ms": a.window_ms,
            "enqueued": load.sent,
            "executed": executed,
            "drain_s": round(drain_s, 1),
            "before_mb": base["used_mb"],
            "peak_mb": max(s["used_mb"] for s in self.samples),
            "after_mb": after["used_mb"],
            "done_key_left": bool(self.r.exists(self.keys.done)),
        }

    def close(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.r.close()
        self.srv.stop()


def windows(samples: list[dict[str, Any]], width: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    load = [s for s in samples if s["phase"] in ("load", "drain")]
    if not load:
        return rows
    start = load[0]["t"]
    group: list[dict[str, Any]] = []
    for s in load + [{"t": float("inf")}]:
        if group and s["t"] - start >= width:
            lags = [x for g in group for x in g["lags"]]
            span = max(1.0, group[-1]["t"] - group[0]["t"] + 1)
            rows.append(
                {
                    "t": group[0]["t"],
                    "exec_per_s": sum(g["executed"] for g in group) / span,
                    "p50": pct(lags, 0.5),
                    "p99": pct(lags, 0.99),
                    "used_mb": max(g["used_mb"] for g in group),
                    "rss": {k: max(g["rss"][k] for g in group) for k in group[0]["rss"]},
                    "load": max(g.get("load", 0.0) for g in group),
                }
            )
            start, group = s["t"], []
        if "lags" in s:
            group.append(s)
    return rows


def report(
    summary: dict[str, Any], rows: list[dict[str, Any]], samples: list[dict[str, Any]]
) -> str:
    lags = [x for s in samples for x in s["lags"]]
    names = list(rows[0]["rss"]) if rows else []
    head = (
        "| t (s) | executed/s | lag p50 (ms) | lag p99 (ms) | used_memory (MB) | "
        + " | ".join(f"RSS {n} (MB)" for n in names)
        + " | host load (1 min) |"
    )
    lines = [head, "|" + "---|" * (6 + len(names))]
    for r in rows:
        lines.append(
            f"| {r['t']:.0f} | {r['exec_per_s']:.0f} | {r['p50']:.0f} | {r['p99']:.0f} | "
            f"{r['used_mb']:.1f} | "
            + " | ".join(f"{r['rss'][n]:.0f}" for n in names)
            + f" | {r['load']:.1f} |"
        )
    s = summary
    lines += [
        "",
        f"rate {s['rate']}/s for {s['seconds']} s, {s['workers']} workers, dedupe window "
        f"{s['window_ms']} ms: enqueued {s['enqueued']}, executed {s['executed']}, "
        f"lost {s['enqueued'] - s['executed']}",
        f"lag over the whole run (sampled): p50 {pct(lags, 0.5):.0f} ms, "
        f"p99 {pct(lags, 0.99):.0f} ms, max {max(lags, default=0)} ms",
        f"Redis used_memory: before {s['before_mb']:.1f} MB, peak {s['peak_mb']:.1f} MB, "
        f"after the drain + one window {s['after_mb']:.1f} MB (drain took {s['drain_s']} s; "
        f"completion records key left: {s['done_key_left']})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="zsched load soak")
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--rate", type=int, default=5000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--window-ms", type=int, default=10_000, help="dedupe window of the soak")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    soak = Soak(a)
    try:
        summary = soak.run()
    finally:
        soak.close()
    rows = windows(soak.samples, max(10.0, a.seconds / 20))
    text = report(summary, rows, soak.samples)
    (soak.out / "soak.json").write_text(json.dumps({"summary": summary, "samples": soak.samples}))
    (soak.out / "soak.md").write_text(text + "\n")
    print(text)
    print(f"results in {soak.out}")
    return 0 if summary["enqueued"] == summary["executed"] else 1


if __name__ == "__main__":
    sys.exit(main())
