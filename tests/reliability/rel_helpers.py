"""Shared pieces of the reliability tests: a dispatcher and worker running in the background,
waiting for conditions, and a TCP proxy that can lose a reply."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import zsched


@contextlib.asynccontextmanager
async def running(
    app: zsched.App, dispatcher: dict[str, Any] | None = None, **worker: Any
) -> AsyncIterator[list[asyncio.Task[None]]]:
    """A dispatcher and a worker of `app`, looping until the block ends."""
    stop = asyncio.Event()
    d = app.dispatcher(**(dispatcher or {}))
    w = app.worker(**worker)
    tasks = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    try:
        yield tasks
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await d.close()
        await w.close()


async def until(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll `cond` until it holds; the timeout is a safety net, not a threshold."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def records(caplog: Any, level: int, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= level and needle in r.getMessage()]


def alive(tasks: list[asyncio.Task[None]]) -> bool:
    return not any(t.done() for t in tasks)


class Proxy:
    """A TCP proxy to Redis that can lose the reply to one chosen command.

    `lose_reply_to(marker)`: the next request containing `marker` reaches Redis and runs, but
    the connection is cut before its reply gets back (the client sees ConnectionError).
    """

    def __init__(self, port: int) -> None:
        self.target = port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.marker: bytes | None = None
        self.lost = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self.marker = marker

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            armed = threading.Event()
            threading.Thread(target=self._up, args=(client, server, armed), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, armed), daemon=True).start()

    def _up(self, src: socket.socket, dst: socket.socket, armed: threading.Event) -> None:
        while data := _recv(src):
            with self._lock:
                if self.marker is not None and self.marker in data:
                    self.marker = None
                    armed.set()
            dst.sendall(data)
        _close(src, dst)

    def _down(self, src: socket.socket, dst: socket.socket, armed: threading.Event) -> None:
        while data := _recv(src):
            if armed.is_set():  # the command ran on the server; its reply never arrives
                self.lost += 1
                break
            dst.sendall(data)
        _close(src, dst)

    def close(self) -> None:
        self.sock.close()


def _recv(s: socket.socket) -> bytes:
    try:
        return s.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()
