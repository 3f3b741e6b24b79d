"""Run zsched CLI processes for integration tests, and await conditions without sleeping blindly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def zsched_proc(*args: str, url: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    e = {**os.environ, "ZSCHED_REDIS_URL": url, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    e.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "zsched", *args, "--redis", url],
        cwd=ROOT / "tests",
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_for(
    cond: Callable[[], object], timeout: float = 30.0, what: str = "condition", poll: float = 0.02
) -> object:
    """Poll `cond` until truthy; fail with `what` after `timeout` (a safety net, not a threshold)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)


def stop(p: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> str:
    if p.poll() is None:
        p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return out.decode(errors="replace")
