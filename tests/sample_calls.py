"""One sample call per Lua script (empty batches), for tests that compare wrappers and docs."""

from __future__ import annotations

from typing import Any

from zsched.protocol.keys import QueueKeys
from zsched.runs import controls as C
from zsched.runs import outcomes as O
from zsched.store import scripts as S
from zsched.worker import limits as L


def sample_calls(k: QueueKeys) -> dict[str, S.Call[Any]]:
    return {
        "enqueue": S.enqueue(k, [], now_ms=None, dedupe_window_ms=1, max_envelope_bytes=1),
        "dispatch": S.dispatch(k, now_ms=None, limit=1, max_backlog=0),
        "ack": S.ack(k, "c", [], now_ms=None, dedupe_window_ms=1),
        "retry": S.retry(k, "c", [], now_ms=None),
        "release": S.release(k, "c", [], now_ms=None),
        "dead": S.dead(k, "c", [], now_ms=None, dedupe_window_ms=1),
        "reclaim": S.reclaim(k, "c", now_ms=None, min_idle_ms=1, count=1, max_deliveries=1),
        "renew": S.renew(k, "c", []),
        "cancel": S.cancel(k, "s@2026-01-01T00:00:00Z", now_ms=None, dedupe_window_ms=1),
        "replay": S.replay(k, [], now_ms=None),
        "schedule": S.schedule(k, "s", b"x", None, expected=(b"", None, b"")),
        "unschedule": S.unschedule(k, "s"),
        "fire": S.fire(
            k, S.FireArgs("s", b"", None, b"", None, b"", None, "allow", 1, [], []),
            now_ms=None, dedupe_window_ms=1, ledger_maxlen=1, ledger_max_age_ms=0,
        ),
        "unlease": S.unlease(k, "s", "r", 1, now_ms=None, dedupe_window_ms=1000),
        "extend": S.extend(k, "s", "r", 1),
        "status": S.status(k, now_ms=None),
        "migrate": S.migrate(k),
        "backfill": S.backfill(k, "s", [], recorded=0, now_ms=None, dedupe_window_ms=1,
                               ledger_maxlen=1),
        "reschedule": C.reschedule(k, "r", 1, now_ms=None),
        "replace": C.replace(k, ("r", 1, "t", b"e"), now_ms=None, dedupe_window_ms=1,
                             max_envelope_bytes=1),
        "revoke": C.revoke(k, "s@2026-01-01T00:00:00Z", now_ms=None, dedupe_window_ms=1),
        "discard": C.discard(k, "c", [], now_ms=None, dedupe_window_ms=1),
        "record": O.record(k, [], now_ms=None, dedupe_window_ms=1),
        "pause": C.pause(k, None, now_ms=None),
        "resume": C.resume(k, now_ms=None),
        "acquire": L.acquire(k, "t", None, "1-1", "r", L.Limits(1), hold_ms=1, now_ms=None),
    }  # fmt: skip
