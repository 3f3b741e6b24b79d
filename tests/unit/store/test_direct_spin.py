"""The reply wait of the direct path (zsched/store/direct.py): poll for a short budget, then sleep.

A socket pair stands in for Redis, so each test decides when the reply arrives.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Any

import hiredis
import pytest
import redis.exceptions as rex

from zsched.store import direct


class _CountingPoll:
    """select.poll that counts its calls."""

    def __init__(self, sock: socket.socket) -> None:
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self.calls = 0

    def poll(self, timeout: int) -> list[Any]:
        self.calls += 1
        return self._poll.poll(timeout)


class _Stub:
    """Stands in for a connected redis-py connection: the direct path reads its `_sock`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock


@pytest.fixture
def pair():
    ours, server = socket.socketpair()
    c = direct._Conn(conn=_Stub(ours))
    c.live = True
    c.reader = hiredis.Reader(protocolError=rex.InvalidResponse, replyError=direct._parse_error)
    c.poll = _CountingPoll(ours)
    yield c, server
    ours.close()
    server.close()


def _reply_later(server: socket.socket, data: bytes, after: threading.Event) -> threading.Thread:
    t = threading.Thread(target=lambda: (after.wait(5), server.sendall(data)))
    t.start()
    return t


def test_a_reply_that_comes_within_the_budget_is_awaited_by_polling(pair) -> None:
    c, server = pair
    server.sendall(b"*2\r\n:1\r\n:0\r\n")
    assert c.read(spin_s=1.0) == [1, 0]
    assert c.poll.calls >= 1
    assert 0 < c.wait_s < 1.0


def test_a_reply_later_than_the_budget_is_read_by_sleeping_in_recv(pair) -> None:
    c, server = pair
    go = threading.Event()
    t = _reply_later(server, b":7\r\n", go)
    # A zero budget polls once at most, then recv() blocks until the reply is sent.
    timer = threading.Timer(0.05, go.set)
    timer.start()
    assert c.read(spin_s=1e-9) == 7
    t.join()
    assert c.poll.calls <= 1
    assert c.wait_s > 1e-9


def test_a_connection_whose_replies_are_slower_than_the_budget_stops_spinning(pair) -> None:
    c, server = pair
    c.wait_s = 0.5  # its recent replies took half a second on average
    server.sendall(b"+OK\r\n")
    assert c.read(spin_s=0.001) == b"OK"
    assert c.poll.calls == 0  # no spinning: it went straight to recv()
    # A fast reply lowers the average; once under the budget, the connection spins again.
    for _ in range(60):
        server.sendall(b"+OK\r\n")
        c.read(spin_s=0.001)
    assert c.wait_s < 0.001
    calls = c.poll.calls
    server.sendall(b"+OK\r\n")
    c.read(spin_s=0.001)
    assert c.poll.calls > calls


def test_a_zero_budget_never_polls(pair) -> None:
    c, server = pair
    server.sendall(b":1\r\n")
    assert c.read(spin_s=0.0) == 1
    assert c.poll.calls == 0


def test_an_error_reply_is_raised_as_redis_pys_exception(pair) -> None:
    c, server = pair
    server.sendall(b"-NOSCRIPT No matching script\r\n")
    with pytest.raises(rex.NoScriptError):
        c.read(spin_s=0.001)
    server.sendall(b"-ERR zsched enqueue: run 0: run_id is empty\r\n")
    with pytest.raises(rex.ResponseError, match="run_id is empty"):
        c.read(spin_s=0.001)


def test_a_reply_split_over_several_packets_is_put_together(pair) -> None:
    c, server = pair
    go = threading.Event()
    server.sendall(b"*2\r\n$5\r\nhel")
    t = _reply_later(server, b"lo\r\n:2\r\n", go)
    go.set()
    assert c.read(spin_s=0.001) == [b"hello", 2]
    t.join()


def test_a_server_that_closes_mid_reply_is_a_connection_error(pair) -> None:
    c, server = pair
    server.sendall(b"*2\r\n:1\r\n")
    server.shutdown(socket.SHUT_WR)
    with pytest.raises(rex.ConnectionError, match="closed by server"):
        c.read(spin_s=0.001)


def test_a_send_to_a_server_that_went_away_is_a_connection_error(pair) -> None:
    # A batch of calls to a Redis killed mid-batch: the later sends fail with EPIPE, which
    # must reach the caller as redis-py's ConnectionError so that retry policies apply
    # (the chaos smoke's enqueuer died on a bare BrokenPipeError).
    c, server = pair
    server.close()
    with pytest.raises(rex.ConnectionError, match="writing to socket"):
        for _ in range(100):
            c.send(("EVALSHA", "x" * 40, 0, "a" * 10_000))


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="spin_us must be >= 0"):
        direct.DirectConnections(pool=None, spin_us=-1)


def test_a_call_does_not_spin_while_another_thread_has_one_in_flight(pair) -> None:
    c, server = pair
    server.sendall(b":1\r\n")
    with direct._IN_FLIGHT, direct._IN_FLIGHT:  # this call and another thread's
        assert c.read(spin_s=1.0) == 1
    assert c.poll.calls == 0  # so this one slept in recv() instead
    server.sendall(b":2\r\n")
    assert c.read(spin_s=1.0) == 2
    assert c.poll.calls >= 1
