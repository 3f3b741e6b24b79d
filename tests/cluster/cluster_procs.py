"""Start zsched CLI processes against a cluster or Sentinel URL, and read what they executed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import redis
from integration.procs import stop as _stop

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def zsched_proc(*args: str, url: str, sink: str, partitions: int = 1) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ZSCHED_REDIS_URL": url, "ZSCHED_TEST_SINK": sink,
           "ZSCHED_TEST_PARTITIONS": str(partitions),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "zsched", *args, "--redis", url],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop(p: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> str:
    return _stop(p, sig, timeout)


def executed(sink: redis.Redis, queue: str) -> Counter[str]:
    """run_id -> how many times a handler ran it."""
    return Counter(x.decode().split("|")[0] for x in sink.lrange(f"exec:{queue}", 0, -1))
