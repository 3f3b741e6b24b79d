"""The harness's drain check: a run moving between places while it reads is not missed.

The smoke once failed with a queued rule fire left in the delayed set although the drain check
had passed: the check read the delayed count, the ready stream and rule_waiting one after
another, and unlease.lua moved the fire from rule_waiting into the delayed set between the
first read and the last. Here the move lands after each command the check sends in turn; the
check must not call the queue drained at any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from chaos_harness import drained_now

from zsched import FakeClock
from zsched.protocol.envelope import Envelope
from zsched.protocol.keys import GROUP
from zsched.store import scripts as S

NOW = 1_800_000_000_000
SID = "r-queue"


class MovesAfter:
    """A client that calls `move` once, after its n-th command (a MULTI pipeline is one)."""

    def __init__(self, r: Any, n: int, move: Callable[[], None]) -> None:
        self.r, self.left, self.move, self.moved = r, n, move, False

    def tick(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.move()
            self.moved = True

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.r, name)
        if name == "pipeline":
            return lambda *a, **kw: _Pipeline(attr(*a, **kw), self)
        if not callable(attr):
            return attr

        def call(*a: Any, **kw: Any) -> Any:
            out = attr(*a, **kw)
            self.tick()
            return out

        return call


class _Pipeline:
    def __init__(self, p: Any, client: MovesAfter) -> None:
        self.p, self.client = p, client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.p, name)

    def execute(self) -> Any:
        out = self.p.execute()
        self.client.tick()
        return out


def env(run_id: str) -> bytes:
    return Envelope(run_id, "tick", None, NOW, NOW, NOW, 1).encode()


def queued_fire(real: Any, queue: str) -> tuple[Any, Callable[[], None]]:
    """A rule's fire waits behind its lease holder, whose run just ended; the move is the
    worker's unlease.lua call, which starts the fire in the delayed set."""
    app = real.app(queue, clock=FakeClock(NOW))
    rid = "r-queue@2"
    real.sync.set(app.keys.lease(SID), "r-queue@1")
    real.sync.hset(app.keys.rule_waiting, SID, f"{len(rid)}:{rid}".encode() + env(rid))

    def move() -> None:
        call = S.unlease(app.keys, SID, "r-queue@1", 0, now_ms=NOW, dedupe_window_ms=60_000)
        assert app.scripts.run(call) == (True, rid)

    return app, move


def handed_back(real: Any, queue: str) -> tuple[Any, Callable[[], None]]:
    """A run on the ready stream, delivered; the move is the worker's shutdown hand-back
    (release.lua), which puts it back in the delayed set."""
    app = real.app(queue, clock=FakeClock(NOW))
    app.scripts.run(S.enqueue(app.keys, [("c1", NOW - 1, "tick", env("c1"))], now_ms=NOW,
                              dedupe_window_ms=60_000, max_envelope_bytes=10_000))  # fmt: skip
    real.sync.xgroup_create(app.keys.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=10, max_backlog=0))
    ((eid, _),) = real.sync.xreadgroup(GROUP, "w1", {app.keys.ready: ">"}, count=10)[0][1]

    def move() -> None:
        assert app.scripts.run(S.release(app.keys, "w1", [(eid.decode(), "c1")], now_ms=NOW)) == [1]

    return app, move


@pytest.mark.parametrize("setup", [queued_fire, handed_back])
@pytest.mark.parametrize("after", [1, 2, 3, 4, 5])
def test_a_run_moving_while_the_drain_check_reads_is_not_missed(
    real: Any, queue: str, setup: Any, after: int
) -> None:
    app, move = setup(real, queue)
    r = MovesAfter(real.sync, after, move)
    polls = 0
    while not r.moved:
        assert not drained_now(r, app.keys, set()), f"drained, move after command {after}"
        polls += 1
        assert polls <= after, "the move never happened"
    assert not drained_now(r, app.keys, set()), "drained with the run in the delayed set"
    # The check itself is right when nothing moves: it calls an empty queue drained.
    real.sync.delete(app.keys.runs, app.keys.delayed, app.keys.ready, app.keys.rule_waiting)
    assert drained_now(r, app.keys, set())
