"""The harness's workers: real zsched Workers, each in a child process
(tests/model/worker_child.py), so that a worker's death is a SIGKILL and nothing of it goes on.

Starting Python and importing zsched costs ~0.5 s of CPU, so it is paid once: a zygote
process imports zsched and forks a child per request (a few milliseconds), and a pool keeps
idle children across examples (a worker started in a child that served before costs a few
milliseconds too). A child talks to this process over a Unix socket. Each example runs on
its own event loop: a child's socket is read through `loop.add_reader` of the loop that uses
it, and its events wait in `inbox` for whoever awaits them.

The clock: `SharedClock` is the parent's FakeClock, and writes each instant into an 8-byte
file that every child maps, so a child's worker reads the instant the parent's dispatchers
use (the parent moves time only once the system settled at an instant).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zsched import FakeClock

ROOT = Path(__file__).resolve().parents[2]
#: Real seconds a child may take to answer before the harness calls it stuck (a safety net).
STUCK_S = 60.0


class SharedClock(FakeClock):
    """A FakeClock whose instant child processes read too (from a mapped 8-byte file)."""

    def __init__(self, now_ms: int) -> None:
        fd, self.path = tempfile.mkstemp(prefix="zsched-model-clock-")
        os.write(fd, bytes(8))
        self._map = mmap.mmap(fd, 8)
        os.close(fd)
        super().__init__(now_ms)
        self.set(now_ms)

    def set(self, now_ms: int) -> None:
        super().set(now_ms)
        struct.pack_into("<q", self._map, 0, self.now_ms())

    def advance(self, ms: int) -> None:
        self.set(self.now_ms() + int(ms))

    def close(self) -> None:
        self._map.close()
        os.unlink(self.path)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Zygote:
    """The process that imported zsched once and forks a child per request."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="zsched-model-")
        self.path = os.path.join(self.dir, "children.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.listener.settimeout(STUCK_S)
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.model.worker_child", self.path],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stderr=self.err,
        )

    def fork(self) -> socket.socket:
        """A new child's connection (it sends `ready` first)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"fork\n")
        self.proc.stdin.flush()
        try:
            conn, _ = self.listener.accept()
        except TimeoutError:
            raise AssertionError(
                f"the worker zygote forked no child: {self.stderr_tail()}"
            ) from None
        return conn

    def stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read()[-2000:].decode(errors="replace")

    def shut(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.listener.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class Child:
    """One forked child; its events are read by the event loop it is attached to."""

    def __init__(self, zygote: Zygote) -> None:
        self.zygote = zygote
        self.sock = zygote.fork()
        self.fd = self.sock.fileno()
        self.sock.setblocking(False)
        self.buffer = b""
        self.inbox: list[dict[str, Any]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.arrived: asyncio.Event | None = None
        #: Called with each `run` event (a handler started), as it arrives.
        self.on_run: Callable[[dict[str, Any]], None] | None = None
        self.eof = False
        #: Its pid, from its `ready` (sent once, when it connected).
        self.pid = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.arrived = loop, asyncio.Event()
        loop.add_reader(self.fd, self._readable)
        self._readable()  # what arrived while no loop read it

    def detach(self) -> None:
        if self.loop is not None and not self.loop.is_closed() and not self.eof:
            self.loop.remove_reader(self.fd)
        self.loop, self.arrived, self.on_run = None, None, None

    def _readable(self) -> None:
        try:
            chunk = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            if self.loop is not None:
                self.loop.remove_reader(self.fd)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            ev = json.loads(line)
            if ev["ev"] == "run" and self.on_run is not None:
                self.on_run(ev)
            else:
                self.inbox.append(ev)
        if self.arrived is not None:
            self.arrived.set()

    def send(self, **cmd: Any) -> None:
        self.sock.sendall((json.dumps(cmd) + "\n").encode())

    async def expect(self, kind: str) -> dict[str, Any]:
        """The next event `kind` (others before it are dropped)."""
        assert self.arrived is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STUCK_S
        while True:
            for i, ev in enumerate(self.inbox):
                if ev["ev"] == kind:
                    del self.inbox[: i + 1]
                    return ev
            if self.eof or loop.time() > deadline:
                raise AssertionError(f"worker child {self.pid} sent no {kind!r}: "
                                     f"{self.zygote.stderr_tail()}")  # fmt: skip
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), max(0.0, deadline - loop.time()))

    def kill(self) -> None:
        """SIGKILL; returns once it is gone (its end of the socket closed with it)."""
        self.detach()
        POOL.cpu_s += cpu_s(self.pid)
        os.kill(self.pid, signal.SIGKILL)
        self.sock.setblocking(True)
        self.sock.settimeout(STUCK_S)
        try:
            while self.sock.recv(1 << 16):
                pass
        except TimeoutError:
            raise AssertionError(f"worker child {self.pid} outlived its SIGKILL") from None
        self.sock.close()


class Pool:
    """Idle children, reused across examples, forked by one zygote."""

    def __init__(self) -> None:
        self.zygote: Zygote | None = None
        self.idle: list[Child] = []
        self.all: list[Child] = []
        #: CPU seconds of the children killed so far (ZSCHED_MODEL_CPU=1 prints the total).
        self.cpu_s = 0.0
        self.forked = 0
        atexit.register(self.shut)

    def take(self, loop: asyncio.AbstractEventLoop) -> Child:
        child = self.idle.pop() if self.idle else self._fork()
        child.attach(loop)
        return child

    def give(self, child: Child) -> None:
        child.detach()
        self.idle.append(child)

    def forget(self, child: Child) -> None:
        self.all.remove(child)

    def _fork(self) -> Child:
        if self.zygote is None:
            self.zygote = Zygote()
        child = Child(self.zygote)
        self.forked += 1
        self.all.append(child)
        return child

    def shut(self) -> None:
        for child in self.all:
            self.cpu_s += cpu_s(child.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        if self.zygote is not None:
            self.cpu_s += cpu_s(self.zygote.proc.pid)
            self.zygote.shut()
        if os.environ.get("ZSCHED_MODEL_CPU") == "1":
            sys.stderr.write(f"model workers: {self.forked} children forked, "
                             f"{self.cpu_s:.1f} s of CPU (with the zygote)\n")  # fmt: skip


POOL = Pool()


class ChildWorker:
    """One zsched Worker running in a pool child."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.child = POOL.take(loop)
        self.consumer = ""

    async def start(self, url: str, queue: str, clock: SharedClock, visibility_ms: int,
                    on_run: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
        self.child.on_run = on_run
        if not self.child.pid:
            self.child.pid = (await self.child.expect("ready"))["pid"]
        self.child.send(op="start", url=url, queue=queue, clock=clock.path,
                        visibility_timeout_ms=visibility_ms)  # fmt: skip
        self.consumer = (await self.child.expect("started"))["consumer"]

    def release(self, run_id: str, attempt: int, kind: str, retry_delay_ms: int) -> None:
        self.child.send(op="release", run_id=run_id, attempt=attempt, kind=kind,
                        retry_delay_ms=retry_delay_ms)  # fmt: skip

    async def reclaim(self) -> int:
        self.child.send(op="reclaim")
        return int((await self.child.expect("reclaimed"))["n"])

    async def stop(self) -> None:
        """Stop the worker gracefully; the child goes back to the pool (killed if stuck)."""
        self.child.send(op="stop")
        try:
            await self.child.expect("stopped")
        except AssertionError:
            self.kill()
            raise
        POOL.give(self.child)

    def kill(self) -> None:
        """SIGKILL: nothing handed back, no outcome written."""
        self.child.kill()
        POOL.forget(self.child)
