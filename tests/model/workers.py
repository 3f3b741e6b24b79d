"""The harness's workers: real zsched Workers, each in a child process
(tests/model/worker_child.py), so that a worker's death is a SIGKILL and nothing of it goes on.

A pool keeps idle children across examples (starting one costs ~0.5 s of CPU; a worker
started in a child that served before costs a few milliseconds); a killed child is replaced by
a new one, spawned at once so that it imports while the example goes on. Each example runs
on its own event loop: a child's stdout is read through `loop.add_reader` of the loop that
uses it, and its events wait in `inbox` for whoever awaits them.

The clock: `SharedClock` is the parent's FakeClock, and writes each instant into an 8-byte
file that every child maps, so a child's worker reads the instant the parent's dispatchers
use (the parent moves time only once the system settled at an instant).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import mmap
import os
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


class Child:
    """One child process; its events are read by the event loop it is attached to."""

    def __init__(self) -> None:
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.model.worker_child"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.out_fd, self.in_fd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
        os.set_blocking(self.out_fd, False)
        self.buffer = b""
        self.inbox: list[dict[str, Any]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.arrived: asyncio.Event | None = None
        #: Called with each `run` event (a handler started), as it arrives.
        self.on_run: Callable[[dict[str, Any]], None] | None = None
        self.eof = False
        #: Its `ready` (sent once, when zsched is imported) was read.
        self.ready = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.arrived = loop, asyncio.Event()
        loop.add_reader(self.out_fd, self._readable)
        self._readable()  # what arrived while no loop read it

    def detach(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(self.out_fd)
        self.loop, self.arrived, self.on_run = None, None, None

    def _readable(self) -> None:
        try:
            chunk = os.read(self.out_fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.eof = True
            if self.loop is not None:
                self.loop.remove_reader(self.out_fd)
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
        os.write(self.in_fd, (json.dumps(cmd) + "\n").encode())

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
                raise AssertionError(f"worker child {self.proc.pid} sent no {kind!r}: "
                                     f"{self.stderr_tail()}")  # fmt: skip
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                pass

    def stderr_tail(self) -> str:
        self.err.seek(0)
        return self.err.read()[-2000:].decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        self.detach()
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.err.close()


class Pool:
    """Idle children, reused across examples."""

    def __init__(self) -> None:
        self.idle: list[Child] = []
        self.all: list[Child] = []
        atexit.register(self.shut)

    def take(self, loop: asyncio.AbstractEventLoop) -> Child:
        child = self.idle.pop() if self.idle else self._spawn()
        child.attach(loop)
        return child

    def give(self, child: Child) -> None:
        child.detach()
        self.idle.append(child)

    def spare(self) -> None:
        """Spawn one now (after a kill) so that it is ready when the next example takes it."""
        if not self.idle:
            self.idle.append(self._spawn())

    def forget(self, child: Child) -> None:
        self.all.remove(child)

    def _spawn(self) -> Child:
        child = Child()
        self.all.append(child)
        return child

    def shut(self) -> None:
        for child in self.all:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()


POOL = Pool()


class ChildWorker:
    """One zsched Worker running in a pool child."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.child = POOL.take(loop)
        self.consumer = ""

    async def start(self, url: str, queue: str, clock: SharedClock, visibility_ms: int,
                    on_run: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
        self.child.on_run = on_run
        if not self.child.ready:
            await self.child.expect("ready")
            self.child.ready = True
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
        """SIGKILL: nothing handed back, no outcome written; a spare replaces it in the pool."""
        self.child.kill()
        POOL.forget(self.child)
        POOL.spare()
