"""Helpers shared by the benchmark scenarios: servers, child processes, clocks and statistics."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import RedisServer  # noqa: E402

#: A payload of about 110 bytes once encoded (msgpack or JSON), as the issue's figures use.
PAD = "x" * 88


def payload(due_ms: int, i: int = 0) -> dict[str, Any]:
    """The benchmark payload: the intended time (for lag) plus padding to ~110 bytes."""
    return {"at": due_ms, "i": i, "pad": PAD}


def now_ms() -> int:
    return int(time.time() * 1000)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return float(s[k])


def median(values: Sequence[float]) -> float:
    vals = [v for v in values if v == v]
    return float(statistics.median(vals)) if vals else float("nan")


@contextmanager
def server(*extra: str) -> Iterator[RedisServer]:
    """A private redis-server; persistence off unless `extra` turns it on.

    It runs at nice -10 where allowed (root): this machine is shared (other test suites run
    beside the benchmark), and a Redis preempted mid-command shows up as a slow script and a
    late PING that no contender caused. Every contender gets the same server."""
    with RedisServer(*extra) as srv:
        if srv.proc is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, srv.proc.pid, -10)
            except OSError:
                pass
        yield srv


def write_results(out: str | None, prefix: str, data: Any) -> None:
    """Write a run's JSON to `out` ("-": nowhere), by default bench-results/<prefix>-<time>.json."""
    out = out or str(ROOT / "bench-results" / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    if out != "-":
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(data, indent=1, default=str))
        print(f"\nwrote {out}")


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, protocol=2)


def commands_processed(r: redis.Redis) -> int:
    return int(r.info("stats")["total_commands_processed"])


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its reaped children, from /proc."""
    try:
        parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(x) for x in parts[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """A process and its live descendants (Celery and Node spawn helpers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            kids = []
        todo.extend(int(k) for k in kids)
    return out


@dataclass
class Progress:
    """What one consumer process reported: handled count, first start, last end (epoch s)."""

    count: int = 0
    first: float = 0.0
    last: float = 0.0
    ready: bool = False


@dataclass
class Proc:
    """A consumer process that prints progress lines: `ready` and `P <count> <first> <last>`."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None
    progress: Progress = field(default_factory=Progress)
    popen: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None
    #: Peers whose handlers run in forked children report through a file of "<t> <lag_ms>"
    #: lines (bench/peers/hits.py) instead of stdout; then progress and lags come from it.
    hits: Path | None = None
    lags: list[float] = field(default_factory=list)
    tailer: threading.Thread | None = None

    def start(self) -> Proc:
        self.popen = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(self.env or {})},
            cwd=self.cwd,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if self.hits is not None:
            self.tailer = threading.Thread(target=self._tail, daemon=True)
            self.tailer.start()
        return self

    def _tail(self) -> None:
        assert self.hits is not None
        pos, rest, pr = 0, "", self.progress
        while self.popen is not None:
            try:
                with open(self.hits) as f:
                    f.seek(pos)
                    chunk = f.read()
                    pos = f.tell()
            except OSError:
                chunk = ""
            lines = (rest + chunk).split("\n")
            rest = lines.pop()
            for line in lines:
                t_s, lag = line.split()
                t = float(t_s)
                pr.first = t if not pr.count else min(pr.first, t)
                pr.last = max(pr.last, t)
                pr.count += 1
                self.lags.append(float(lag))
            if self.popen.poll() is not None and not chunk:
                return
            time.sleep(0.01)

    def _read(self) -> None:
        assert self.popen and self.popen.stdout
        for line in self.popen.stdout:
            line = line.strip()
            if line == "ready":
                self.progress.ready = True
            elif line.startswith("P "):
                _, c, f, la = line.split()
                self.progress.count, self.progress.first, self.progress.last = (
                    int(c),
                    float(f),
                    float(la),
                )
            else:
                self.lines.append(line)

    @property
    def pid(self) -> int:
        assert self.popen
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the graceful stop of every contender), then SIGKILL the group if stuck."""
        if not self.popen:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        if self.reader is not None:
            self.reader.join(5)
        if self.tailer is not None:
            self.tailer.join(5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()

    def tail(self) -> str:
        return "\n".join(self.lines[-20:])


class BenchError(RuntimeError):
    pass


def wait_ready(procs: Sequence[Proc], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.progress.ready for p in procs):
        for p in procs:
            if not p.alive():
                raise BenchError(f"{p.argv[:4]} exited before it was ready:\n{p.tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"consumers not ready after {timeout}s: {procs[0].tail()}")
        time.sleep(0.01)


def wait_count(procs: Sequence[Proc], n: int, timeout: float) -> tuple[int, float, float]:
    """Wait until the processes handled `n` runs together; (count, first, last) at that point."""
    deadline = time.monotonic() + timeout
    while True:
        count = sum(p.progress.count for p in procs)
        if count >= n:
            break
        for p in procs:
            if not p.alive():
                raise BenchError(f"{p.argv[:4]} died:\n{p.tail()}")
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    active = [p.progress for p in procs if p.progress.count]
    first = min((p.first for p in active), default=0.0)
    last = max((p.last for p in active), default=0.0)
    return count, first, last


def read_lags(path: Path) -> list[float]:
    """Lags (ms) a consumer wrote at exit, one JSON list per process file."""
    out: list[float] = []
    for f in sorted(path.parent.glob(path.name + "*")):
        try:
            out.extend(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    return out
