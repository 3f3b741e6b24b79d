"""Faults and processes of a chaos run: the dispatcher/worker slots and how each fault is done."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from chaos_plan import Config, Fault

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from redis_server import RedisServer  # noqa: E402

QUEUE = "chaos"
CTL = "chaos-ctl"  # the harness's own connections, never a CLIENT KILL target
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class Procs:
    """The dispatcher and worker processes, by slot name; each restart is a new generation."""

    def __init__(self, cfg: Config, url: str, sink_url: str, out: Path, rules: bool) -> None:
        self.cfg, self.url, self.out, self.rules = cfg, url, out, rules
        self.env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}",
            "CHAOS_REDIS_URL": url,
            "CHAOS_SINK_URL": sink_url,
            "CHAOS_QUEUE": QUEUE,
            "CHAOS_RULES": "1" if rules else "0",
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.gen: Counter[str] = Counter()
        self.files: list[Path] = []
        self.stopped: set[str] = set()
        self.expected_exit: set[int] = set()

    def slots(self) -> list[str]:
        return [f"dispatcher-{i}" for i in range(self.cfg.dispatchers)] + [
            f"worker-{i}" for i in range(self.cfg.workers)
        ]

    def spawn(self, slot: str) -> None:
        self.gen[slot] += 1
        path = self.out / f"{slot}.gen{self.gen[slot]}.log"
        self.files.append(path)
        if slot.startswith("dispatcher"):
            # Dispatchers fire every rule stored in Redis; the harness creates the rules.
            args = ["-m", "zsched", "-v", "dispatcher", "--redis", self.url, "--queue", QUEUE]
        else:
            args = [
                "-m",
                "chaos_proc",
                "worker",
                str(self.cfg.visibility_ms),
                str(self.cfg.concurrency),
            ]
        with open(path, "wb") as f:
            self.procs[slot] = subprocess.Popen(
                [sys.executable, *args],
                cwd=self.out,
                env=self.env,
                stdout=f,
                stderr=subprocess.STDOUT,
            )

    def kill(self, slot: str) -> None:
        p = self.procs[slot]
        self.expected_exit.add(p.pid)
        p.kill()
        p.wait()
        self.stopped.discard(slot)
        self.spawn(slot)

    def signal(self, slot: str, sig: int) -> None:
        self.procs[slot].send_signal(sig)
        (self.stopped.add if sig == signal.SIGSTOP else self.stopped.discard)(slot)

    def reap_crashes(self) -> list[str]:
        """Processes that exited without being told to: record and restart them."""
        crashed = []
        for slot, p in list(self.procs.items()):
            if p.poll() is not None and p.pid not in self.expected_exit:
                crashed.append(f"{slot} gen{self.gen[slot]} exited with {p.returncode}")
                self.spawn(slot)
        return crashed

    def stop_all(self) -> dict[str, int | None]:
        for slot in list(self.stopped):
            self.signal(slot, signal.SIGCONT)
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        codes: dict[str, int | None] = {}
        for slot, p in self.procs.items():
            try:
                codes[slot] = p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[slot] = p.wait()
        return codes


def ctl_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, protocol=2, client_name=CTL, socket_timeout=10)


def retrying(fn: Any, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except (*REDIS_DOWN, redis.exceptions.BusyLoadingError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _client_kill(r: redis.Redis, n: int, rng: random.Random) -> int:
    mine = r.client_id()
    rows = [c for c in r.client_list() if c.get("name") != CTL and int(c["id"]) != mine]
    killed = 0
    for c in rng.sample(rows, min(n, len(rows))):
        killed += int(r.execute_command("CLIENT", "KILL", "ID", c["id"]) or 0)
    return killed


def apply_fault(
    f: Fault, procs: Procs, srv: RedisServer, ctl: redis.Redis, rng: random.Random
) -> str:
    if f.kind == "kill":
        procs.kill(f.target)
    elif f.kind == "stop":
        procs.signal(f.target, signal.SIGSTOP)
    elif f.kind == "cont":
        procs.signal(f.target, signal.SIGCONT)
    elif f.kind == "redis_kill":
        srv.kill()
        time.sleep(f.arg)  # the outage itself is the fault
        srv.start()
    elif f.kind == "redis_stop":
        # The harness waits out the hang too: the faults planned meanwhile come after it (a
        # kill of the hung server would cut the hang short).
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(f.arg)  # hung: every client's call waits for its socket timeout
        finally:
            srv.proc.send_signal(signal.SIGCONT)
    elif f.kind == "script_flush":
        retrying(lambda: ctl.script_flush())
    elif f.kind == "client_kill":
        n = retrying(lambda: _client_kill(ctl, int(f.arg), rng))
        return f"killed {n}"
    return "ok"


class SingleServer:
    """The faulted deployment of a plain chaos run: one redis-server with an fsynced AOF."""

    def __init__(self, dir: Path) -> None:
        # The latency monitor explains a lag spike: a slow fsync, a long script, the AOF load.
        self.srv = RedisServer("--appendonly", "yes", "--appendfsync", "always",
                               "--latency-monitor-threshold", "100", dir=str(dir)).start()  # fmt: skip
        self.url = self.srv.url
        self._ctl = ctl_client(self.url)
        self._snap = ctl_client(self.url)

    def ctl(self) -> redis.Redis:
        """The harness's client on the server that holds the queue."""
        return self._ctl

    def snapshot_client(self) -> redis.Redis:
        return self._snap

    def rules_app(self) -> Any:
        import zsched

        return zsched.App(ctl_client(self.url), queue=QUEUE)

    def apply(self, f: Fault, procs: Procs, rng: random.Random) -> str:
        return apply_fault(f, procs, self.srv, self._ctl, rng)

    def alive(self) -> bool:
        return self.srv.proc is not None and self.srv.proc.poll() is None

    def stop(self) -> None:
        self._ctl.close()
        self._snap.close()
        self.srv.stop()
