"""release.lua tells a hand-back refused because another consumer holds the entry (0, fenced)
from one whose entry or run is gone (2), and the worker counts them apart.

Before, both were 0, and the worker summed the codes as "runs handed back"; with a third code
that sum would count every gone entry twice: the caller now counts each code by name.
"""

from __future__ import annotations

import logging

from helpers import NOW, seed_ready
from state import snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S


def _release(app, consumer, pairs):
    return app.scripts.run(S.release(app.keys, consumer, pairs, now_ms=NOW))


def test_release_of_a_held_run_puts_it_back_due_now(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    assert _release(app, "c1", [(ent["a"], "a")]) == [HoldCode.OK]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"a": NOW} and st["ready"] == [] and st["pending"] == []


def test_release_of_an_entry_another_consumer_holds_is_fenced(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    before = snapshot(backend.sync, app.keys)
    assert _release(app, "c2", [(ent["a"], "a")]) == [HoldCode.FENCED]
    assert snapshot(backend.sync, app.keys) == before


def test_release_of_an_entry_no_longer_pending_is_gone(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    backend.sync.xack(app.keys.ready, GROUP, ent["a"])  # its outcome was written already
    before = snapshot(backend.sync, app.keys)
    assert _release(app, "c1", [(ent["a"], "a")]) == [HoldCode.GONE]
    assert snapshot(backend.sync, app.keys) == before


def test_release_of_a_held_entry_whose_run_is_no_longer_live_is_gone(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    backend.sync.hdel(app.keys.runs, "a")
    before = snapshot(backend.sync, app.keys)
    assert _release(app, "c1", [(ent["a"], "a")]) == [HoldCode.GONE]
    assert snapshot(backend.sync, app.keys) == before


def test_release_codes_of_one_batch_are_per_pair(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a", "b", "c"])
    backend.sync.xack(app.keys.ready, GROUP, ent["b"])
    backend.sync.xclaim(app.keys.ready, GROUP, "c2", 0, [ent["c"]])
    pairs = [(ent[x], x) for x in "abc"]
    assert _release(app, "c1", pairs) == [HoldCode.OK, HoldCode.GONE, HoldCode.FENCED]


async def test_a_stopping_worker_counts_each_release_code_apart(
    backend, queue, monkeypatch, caplog
) -> None:
    """One run handed back, one fenced (taken over between the worker's read of its pending
    entries and the release), one gone (its run no longer live)."""
    app = backend.app(queue)
    w = app.worker(redis=backend.async_client())
    _, ent = seed_ready(backend, queue, ["a", "b", "c"], consumer=w.consumer)
    r, k = backend.sync, app.keys
    r.hdel(k.runs, "c")
    mine = [(ent[x], x) for x in "abc"]
    r.xclaim(k.ready, GROUP, "other", 0, [ent["b"]])

    async def own_pending():
        return list(mine)

    monkeypatch.setattr(w.holds, "own_pending", own_pending)
    caplog.set_level(logging.DEBUG, logger="zsched.worker.worker")
    try:
        await w.holds.hand_back()
    finally:
        await w.close()
    reg = app.metrics.registry
    fenced = reg.get_sample_value("zsched_fenced_total", {"queue": queue, "reason": "release"})
    assert fenced == 1
    text = [rec.getMessage() for rec in caplog.records]
    assert "handed back 1 runs" in text
    assert any("1 fenced" in t and "1 gone" in t for t in text)
    assert list(snapshot(r, k)["delayed"]) == ["a"]
