"""Processes of the Celery tests: a real Celery 5 worker, zsched dispatchers and bridges."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def env_for(broker: str, record_url: str, celery_queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "CELERY_TEST_BROKER": broker,
        "CELERY_TEST_REDIS": record_url,
        "CELERY_TEST_QUEUE": celery_queue,
        "PYTHONPATH": f"{ROOT}:{HERE}",
    }


def celery_worker(env: dict[str, str], queue: str) -> subprocess.Popen[bytes]:
    """A Celery worker (threads pool: tasks of one rule could overlap if nothing held them)."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_testapp", "worker", "--pool=threads",
         "-c", "4", "-Q", queue, "--without-mingle", "--without-gossip", "--without-heartbeat",
         "-l", "warning"],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def zsched(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "zsched", *args], cwd=HERE, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def stop(p: subprocess.Popen[bytes], kill: bool = False) -> str:
    if p.poll() is None:
        p.kill() if kill else p.terminate()
    try:
        out, _ = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return out.decode(errors="replace")


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll until truthy (the timeout is a safety net, not a threshold)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def records(r: Any, key: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


@contextmanager
def blackhole() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: a broker that hangs."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        done.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def celery_beat(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`celery beat` with zsched's Scheduler class (its schedule file in a private place)."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_testapp", "beat", "-S",
         "zsched.integrations.celery:Scheduler", "-l", "warning"],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
