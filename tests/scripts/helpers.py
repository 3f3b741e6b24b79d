"""Small builders shared by the script tests."""

from __future__ import annotations

from typing import Any

from zsched import FakeClock
from zsched.protocol.envelope import Envelope
from zsched.protocol.keys import GROUP
from zsched.store import scripts as S

NOW = 1_800_000_000_000


def env(run_id: str, task: str = "t", attempt: int = 1) -> bytes:
    return Envelope(run_id, task, None, NOW, NOW, NOW, attempt).encode()


def seed_delayed(backend: Any, queue: str, runs: dict[str, int]) -> Any:
    """Enqueue runs {run_id: run_at_ms} through the real script."""
    app = backend.app(queue, clock=FakeClock(NOW))
    groups = [(rid, at, "t", env(rid)) for rid, at in runs.items()]
    app.scripts.run(S.enqueue(app.keys, groups, now_ms=NOW, dedupe_window_ms=60_000,
                              max_envelope_bytes=10_000))  # fmt: skip
    return app


def seed_ready(backend: Any, queue: str, run_ids: list[str], consumer: str = "c1") -> Any:
    """Runs dispatched and delivered to `consumer`. Returns (app, {run_id: entry_id})."""
    app = seed_delayed(backend, queue, dict.fromkeys(run_ids, NOW - 1))
    backend.sync.xgroup_create(app.keys.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=1000, max_backlog=0))
    rows = backend.sync.xreadgroup(GROUP, consumer, {app.keys.ready: ">"}, count=1000)
    entries = {f[b"run_id"].decode(): eid.decode() for eid, f in rows[0][1]} if rows else {}
    return app, entries
