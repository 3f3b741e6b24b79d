"""backfill.lua: given Redis state, a call, the reply and the resulting state."""

from __future__ import annotations

import pytest
import redis

from zsched.protocol.keys import QueueKeys
from zsched.protocol.replies import EnqueueCode
from zsched.rules.ledger import history
from zsched.store import scripts as S

NOW = 1_800_000_000_000


def call(app, slots, recorded=0):
    return app.scripts.run(S.backfill(app.keys, "r", slots, recorded=recorded, now_ms=NOW,
                                      dedupe_window_ms=60_000, ledger_maxlen=100))  # fmt: skip


def stats(app) -> dict[str, int]:
    return {a.decode(): int(b) for a, b in app.redis.hgetall(app.keys.stats).items()}


def test_backfill_enqueues_free_slots_and_counts_the_rest(real, queue) -> None:
    app = real.app(queue)
    app.redis.hset(app.keys.runs, "r@live", b"x")
    app.redis.zadd(app.keys.done, {"r@done": NOW - 1000, "r@old": NOW - 120_000})
    slots = [(f"r@{n}", i, b"env") for i, n in enumerate(["new", "live", "done", "old"])]
    E = EnqueueCode
    assert call(app, slots, recorded=2) == [E.ENQUEUED, E.DUPLICATE_LIVE, E.DUPLICATE_DONE,
                                            E.ENQUEUED]  # fmt: skip
    assert stats(app) == {"enqueued": 2, "ledger:backfilled::r": 2, "duplicate:backfill:r": 4}
    rows = history(app.redis, app.keys, "r")
    assert sorted((row["slot_ms"], row["run_id"], row["outcome"]) for row in rows) == [
        (0, "r@new", "backfilled"), (3, "r@old", "backfilled")]  # fmt: skip
    assert app.get_run("r@new").state == "scheduled"


@pytest.mark.parametrize("bad", [("", 1, b"e"), ("r@x", "soon", b"e"), ("r@x", 1, b"")])
def test_backfill_refuses_bad_input_and_writes_nothing(real, queue, bad) -> None:
    app = real.app(queue)
    with pytest.raises(redis.ResponseError, match="zsched backfill: slot 1"):
        call(app, [("r@ok", 1, b"e"), bad])
    assert not app.redis.keys(QueueKeys(queue).pattern())
