"""Sync script calls on connections of our own: EVALSHA without redis-py's per-command path.

One `enqueue()` is a round trip plus a short script, so what the client does around the round
trip is most of its cost. Two things are measured in BENCHMARKS.md ("One-call enqueue"):

- redis-py's path around a command -- pool checkout with a poll(), retry wrapper, Script's
  NOSCRIPT handling, its packer and reader -- costs about as much as the script;
- a thread that sleeps in recv() until the reply arrives is woken late: on this project's
  2-core VMs a loopback PING takes ~60 us that way and ~23 us when the socket is polled
  without sleeping, for the same CPU time per call (the wake-up is idle time, not work).

So a direct connection packs the command with hiredis, sends it on the socket, and polls the
socket for a short budget (`spin_us`, 200 us by default) before it sleeps in recv(). The spin
is adaptive: it is skipped while the replies of this connection take longer than the budget
on average (a remote Redis, big batches), so a slow server costs no spinning CPU, and while
another thread of the process has a call in flight (their calls overlap anyway).
Connections of a class we do not know (Sentinel-managed, client-side caching) keep
redis-py's reader, which handles their special replies, and still spin before it.
"""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Any

import hiredis
import redis
import redis.exceptions as rex
from redis.sentinel import SentinelConnectionPool

from zsched.errors import InvalidArgument

try:  # redis-py's error-reply mapping (NOSCRIPT -> NoScriptError ...), shared by its parsers
    from redis._parsers import BaseParser

    _parse_error: Any = BaseParser.parse_error
except ImportError:  # pragma: no cover - a redis-py without it: every connection reads via redis-py
    _parse_error = None

#: Default longest poll for a reply before sleeping in recv() (microseconds); 0 = never spin.
DEFAULT_SPIN_US = 200
#: Connection classes whose replies are plain RESP that our own hiredis reader can take.
_LEAN = (redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection)
_POLL = getattr(select, "poll", None)  # not on Windows: no spin there


class _InFlight:
    """Direct calls in flight in this process. A call spins only while it is the only one:
    with several threads enqueueing at once, a spinning thread takes the GIL and a core from
    the others while their calls overlap anyway. Measured with 4 threads enqueueing: 13.1k
    runs/s with every thread spinning against 19.3k without; spinning only while alone stays
    within the noise of not spinning (26-36k against 17-37k runs/s, 5 runs each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.n = 0

    def __enter__(self) -> None:
        with self._lock:
            self.n += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.n -= 1


_IN_FLIGHT = _InFlight()


def _reset_in_flight() -> None:  # a forked child has none of the parent's calls in flight
    global _IN_FLIGHT
    _IN_FLIGHT = _InFlight()


os.register_at_fork(after_in_child=_reset_in_flight)

#: Returned when the call surely did not run (NOSCRIPT, not sent): run it via redis-py instead.
FALLBACK = object()


class _Conn:
    """One redis-py connection (it does the handshake: TLS, AUTH, HELLO, Sentinel's master
    lookup) whose socket we then read and write ourselves.

    The socket is reached through the connection each time, never held here: an App dropped
    without close() is then collected like a plain redis-py connection, whose __del__ closes
    the socket before the socket's own finalizer can warn (ResourceWarning)."""

    __slots__ = ("conn", "live", "reader", "poll", "wait_s")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.live = False
        self.reader: Any = None
        self.poll: Any = None
        #: Moving average of this connection's reply waits (s): decides whether to spin.
        self.wait_s = 0.0

    def connect(self) -> None:
        self.conn.connect()
        self.live = True
        sock = getattr(self.conn, "_sock", None)
        if sock is None:  # a connection class we cannot see into: redis-py reads
            return
        if type(self.conn) in _LEAN and _parse_error is not None and _POLL is not None:
            self.reader = hiredis.Reader(protocolError=rex.InvalidResponse, replyError=_parse_error)
        if _POLL is not None:
            self.poll = _POLL()
            self.poll.register(sock, select.POLLIN)

    def disconnect(self) -> None:
        self.live, self.reader, self.poll = False, None, None
        self.conn.disconnect()

    def stale(self) -> bool:
        """Something to read before we sent anything: the server closed it (timeout, restart)."""
        if self.reader is not None:
            return bool(self.poll.poll(0)) or bool(self.reader.has_data())
        return bool(self.conn.can_read())

    def send(self, args: tuple[Any, ...]) -> None:
        if self.reader is not None:
            data = hiredis.pack_command(args)
            try:
                self.conn._sock.sendall(data)
            except TimeoutError as e:  # as redis-py reports them, so retry policies apply
                raise rex.TimeoutError("Timeout writing to socket") from e
            except OSError as e:  # EPIPE/ECONNRESET: the server went away mid-batch
                raise rex.ConnectionError(f"Error while writing to socket: {e}") from e
        else:
            self.conn.send_command(*args)

    def read(self, spin_s: float, raise_errors: bool = True) -> Any:
        t0 = time.perf_counter()
        if self.poll is not None and self.wait_s < spin_s and _IN_FLIGHT.n <= 1:
            poll, deadline = self.poll.poll, t0 + spin_s
            while not poll(0) and time.perf_counter() < deadline:
                pass
        if self.reader is None:
            try:
                reply = self.conn.read_response()  # raises error replies itself
            except rex.ResponseError as e:
                reply = e
        else:
            reply = self._read_reply()
        waited = time.perf_counter() - t0
        self.wait_s = waited if self.wait_s == 0 else 0.8 * self.wait_s + 0.2 * waited
        if raise_errors and isinstance(reply, rex.ResponseError):
            raise reply
        return reply

    def _read_reply(self) -> Any:
        reader, sock = self.reader, self.conn._sock
        reply = reader.gets()
        while reply is False:
            try:
                data = sock.recv(65536)
            except TimeoutError as e:
                raise rex.TimeoutError("Timeout reading from socket") from e
            except OSError as e:
                raise rex.ConnectionError(f"Error while reading from socket: {e}") from e
            if not data:
                raise rex.ConnectionError("Connection closed by server.")
            reader.feed(data)
            reply = reader.gets()
        return reply


class DirectConnections:
    """EVALSHA on a few connections built like the client's own (same class and settings).

    Whatever is not a reply or a script error returns FALLBACK when the command surely did
    not run (NOSCRIPT, a connection that failed before the send), and the caller runs the call
    through redis-py's path, which loads scripts and reconnects as configured. A reply lost
    after the send is raised, as redis-py does: the script may have run.
    """

    def __init__(self, pool: Any, spin_us: int = DEFAULT_SPIN_US) -> None:
        if spin_us < 0:
            raise InvalidArgument(f"spin_us must be >= 0, got {spin_us!r}", "spin_us")
        self._pool = pool
        # A Sentinel pool owns only connections to the current master: one to a master that
        # Sentinel replaced is dropped before use (zsched/store/sentinel_watch.py).
        self._owns: Any = pool.owns_connection if isinstance(pool, SentinelConnectionPool) else None
        self._spin_s = spin_us / 1e6
        self._lock = threading.Lock()
        self._idle: list[_Conn] = []
        self._pid = os.getpid()

    def _send_first(self, sha: str, keys: list[str], args: list[Any]) -> _Conn | None:
        """A ready connection with this call sent on it; None when it was not sent (no
        connection, or an argument hiredis cannot pack): then redis-py's path connects and
        retries as configured, or names the bad argument."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child never shares the parent's sockets
                self._idle, self._pid = [], os.getpid()
            c = self._idle.pop() if self._idle else None
        if c is None:
            c = _Conn(self._pool.connection_class(**self._pool.connection_kwargs))
        try:
            if c.live and (c.stale() or (self._owns is not None and not self._owns(c.conn))):
                c.disconnect()
            if not c.live:
                c.connect()
            c.send(("EVALSHA", sha, len(keys), *keys, *args))
        except (rex.ConnectionError, rex.TimeoutError, OSError, TypeError):
            c.disconnect()
            return None
        except BaseException:
            c.disconnect()
            raise
        return c

    def evalsha_many(self, sha: str, calls: list[tuple[list[str], list[Any]]]) -> Any:
        """Send every call before reading a reply, so Redis runs the first calls while the
        rest are packed and sent (a pipeline sends only once all are packed). Returns the
        replies in order, an error reply as its exception (NoScriptError: that call did not
        run), or FALLBACK when nothing was sent."""
        c = self._send_first(sha, *calls[0])
        if c is None:
            return FALLBACK
        sent = 1
        try:
            with _IN_FLIGHT:
                for keys, args in calls[1:]:
                    c.send(("EVALSHA", sha, len(keys), *keys, *args))
                    sent += 1
                replies = [c.read(self._spin_s, raise_errors=False) for _ in range(sent)]
        except BaseException:
            # Some calls may have run and their replies are lost: raise, as for one call.
            c.disconnect()
            raise
        self._put(c)
        return replies

    def evalsha(self, sha: str, keys: list[str], args: list[Any]) -> Any:
        c = self._send_first(sha, keys, args)
        if c is None:
            return FALLBACK
        try:
            with _IN_FLIGHT:
                reply = c.read(self._spin_s)
        except rex.NoScriptError:
            self._put(c)
            return FALLBACK
        except rex.ResponseError:
            self._put(c)
            raise
        except BaseException:
            # Sent, and the reply was lost or interrupted: the script may have run. Raise, as
            # redis-py does, rather than run it again and report a duplicate of our own run.
            c.disconnect()
            raise
        self._put(c)
        return reply

    def _put(self, c: _Conn) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._idle.append(c)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.disconnect()
