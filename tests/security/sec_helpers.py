"""Private redis-servers with auth or TLS, and zsched processes pointed at them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from redis_server import RedisServer, server_kind

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"


def acl_rule(password: str) -> str:
    """The `user zsched ...` line of docs/security.md, with `password`."""
    m = re.search(r"```acl\n(user zsched .+?)\n```", DOC.read_text(), re.S)
    assert m, "docs/security.md has no ```acl block with the zsched user"
    rule = m[1].replace(">CHANGE-ME", ">" + password)
    # The doc's advice for Redis >= 7.2 and Valkey, which know CLIENT SETINFO (7.0 refuses
    # the rule): without it redis-py's SETINFO on connect is logged as refused.
    kind, version = server_kind()
    if kind == "valkey" or version >= (7, 2):
        rule += " +client|setinfo"
    return rule


class AuthServer(RedisServer):
    """A redis-server whose default user needs `admin_password` (readiness pings with it)."""

    def __init__(self, admin_password: str, *extra: str, **kw: Any) -> None:
        super().__init__(*extra, **kw)
        self.admin_password = admin_password

    def admin(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.admin_password)

    def client_kwargs(self) -> dict[str, object]:
        return {"password": self.admin_password}


def env_for(url: str, sink_url: str) -> dict[str, str]:
    return {**os.environ, "ZSCHED_REDIS_URL": url, "SEC_SINK_URL": sink_url,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}  # fmt: skip


def spawn(log: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "zsched", *args], cwd=ROOT / "tests",
                                env=env, stdout=f, stderr=subprocess.STDOUT)  # fmt: skip


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zsched", *args], cwd=ROOT / "tests", env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def wait_for(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def scrape(port: int, timeout: float = 20.0) -> str:
    """GET /metrics of a process, waiting for its server to come up."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                return str(resp.read().decode())
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stop(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(20))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes
