"""A real zsched Worker in a child process, for the model's harness (tests/model/workers.py):
the worker whose death is modelled is killed with SIGKILL, so nothing of it goes on.

`python -m tests.model.worker_child SOCKET` is a zygote: it imports zsched once (~0.5 s of
CPU), then forks a child for each `fork` line on its stdin (a few milliseconds). Each child
connects to the parent's Unix socket SOCKET, reads one JSON command a line and writes one JSON
event a line. A child serves one worker at a time and many in turn (a pool reuses it across
examples). The zygote runs no event loop and no thread, so a fork copies nothing running; it
ignores SIGCHLD, so a killed child is reaped at once.

Commands: `start` {url, queue, clock, visibility_timeout_ms} runs a worker of task "t" on that
queue; `release` {run_id, attempt, kind, retry_delay_ms} lets a held attempt end (ok, retry,
fail); `reclaim` takes over idle entries of dead consumers now (the harness has aged them);
`stop` stops the worker. Events: `ready` {pid} (once), `started` {consumer}, `run` {run_id,
attempt, deliveries, now} when a handler starts, `reclaimed` {n}, `stopped`.

The clock: the parent's FakeClock writes its instant into an 8-byte file (`clock`, mapped
here), so this process reads the same instant as the parent's dispatchers; the parent moves
time only once every handler started and every outcome due was written.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis

import zsched
from zsched.observability.metrics import Metrics


class MappedClock:
    """The instant the parent's clock wrote into a shared 8-byte file."""

    def __init__(self, path: str) -> None:
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 8)

    def now_ms(self) -> int:
        value: int = struct.unpack_from("<q", self._map)[0]
        return value

    def close(self) -> None:
        self._map.close()


#: Writes one event to the parent (set when the child connected).
_write: Callable[[bytes], None] = sys.stdout.buffer.write


def send(**event: Any) -> None:
    _write((json.dumps(event) + "\n").encode())


class Served:
    """One worker of this process: its App, its clients, its held attempts."""

    def __init__(self, cmd: dict[str, Any]) -> None:
        self.clock = MappedClock(cmd["clock"])
        self.sync = redis.Redis.from_url(cmd["url"], protocol=2)
        self.app = zsched.App(self.sync, queue=cmd["queue"], clock=self.clock, metrics=Metrics())
        self.app.task(name="t", max_attempts=5)(self.handler)
        self.worker: Any = self.app.worker(
            redis=aioredis.Redis.from_url(cmd["url"], protocol=2),
            concurrency=64,
            visibility_timeout_ms=cmd["visibility_timeout_ms"],
            max_deliveries=1000,  # the model reclaims without limit
        )
        #: (run id, attempt) -> [release event, kind, retry delay ms]
        self.gates: dict[tuple[str, int], list[Any]] = {}
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.worker.run(self.stop))

    async def handler(self, payload: Any) -> None:
        info = zsched.current_run()
        gate: list[Any] = [asyncio.Event(), "ok", 0]
        self.gates[(info.run_id, info.attempt)] = gate
        send(ev="run", run_id=info.run_id, attempt=info.attempt, deliveries=info.deliveries,
             now=self.clock.now_ms())  # fmt: skip
        await gate[0].wait()
        if gate[1] == "retry":
            raise zsched.Retry(delay=gate[2] / 1000)
        if gate[1] == "fail":
            raise zsched.Fail("its fate")

    def release(self, cmd: dict[str, Any]) -> None:
        gate = self.gates.pop((cmd["run_id"], cmd["attempt"]), None)
        if gate is None:  # its handler was stopped meanwhile
            return
        gate[1], gate[2] = cmd["kind"], cmd["retry_delay_ms"]
        gate[0].set()

    async def reclaim(self) -> int:
        """One reclaim pass now, as the read loop makes one when its reclaim is due."""
        w = self.worker
        # The group first: a worker asked right after its start may not have made it yet
        # (XAUTOCLAIM then fails with NOGROUP and the child died; make model at load 15).
        await w.setup()
        found = await w.holds.reclaim(w.reader.free_slots())
        for d in found:
            w.runner.start(d)
        return len(found)

    async def close(self) -> None:
        for gate in self.gates.values():
            gate[0].set()
        self.stop.set()
        await self.task
        await self.worker.close()
        self.app.close()
        self.clock.close()


async def serve(sock: socket.socket) -> None:
    global _write
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    _write = writer.write
    send(ev="ready", pid=os.getpid())
    served: Served | None = None
    while line := await reader.readline():
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "start":
            served = Served(cmd)
            send(ev="started", consumer=served.worker.consumer)
        elif op == "release" and served is not None:
            served.release(cmd)
        elif op == "reclaim" and served is not None:
            send(ev="reclaimed", n=await served.reclaim())
        elif op == "stop" and served is not None:
            await served.close()
            served = None
            send(ev="stopped")


def zygote(path: str) -> None:
    """Fork a served child per `fork` line on stdin, until stdin ends."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin:
        if line.strip() != "fork":
            continue
        if os.fork() == 0:
            sys.stdin.close()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                asyncio.run(serve(sock))
            finally:
                os._exit(0)


if __name__ == "__main__":
    zygote(sys.argv[1])
