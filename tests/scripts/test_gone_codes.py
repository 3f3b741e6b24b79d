"""ack, retry, dead and discard tell a fence (code 0: the entry is pending with another
consumer) from an entry no longer pending at all (code 2: written already, by whoever reclaimed
it or by this consumer's own earlier call whose reply was lost). The writer leans on it:
zsched/worker/writer.py, docs/protocol.md "Hold codes"."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import NOW, env, seed_ready
from state import snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.runs import controls as C
from zsched.store import scripts as S


def _call(what: str, app: Any, consumer: str, entry: str, run_id: str) -> Any:
    k = app.keys
    if what == "ack":
        return S.ack(k, consumer, [(entry, run_id)], now_ms=NOW, dedupe_window_ms=60_000)
    if what == "retry":
        return S.retry(k, consumer, [(entry, run_id, 5000, env(run_id, attempt=2))], now_ms=NOW)
    if what == "dead":
        return S.dead(k, consumer, [(entry, run_id, "failed: boom", env(run_id))], now_ms=NOW)
    return C.discard(k, consumer, [(entry, run_id)], now_ms=NOW, dedupe_window_ms=60_000)


KINDS = ["ack", "retry", "dead", "discard"]


@pytest.mark.parametrize("what", KINDS)
def test_a_resend_of_a_written_outcome_is_gone_and_changes_nothing(backend, queue, what) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    call = _call(what, app, "c1", ent["a"], "a")
    assert app.scripts.run(call) == [HoldCode.OK]
    before = snapshot(backend.sync, app.keys)
    assert app.scripts.run(call) == [HoldCode.GONE]
    after = snapshot(backend.sync, app.keys)
    assert after["stats"].pop("gone") == 1 and "fenced" not in after["stats"]
    before["stats"].pop("gone", None)
    assert after == before


@pytest.mark.parametrize("what", KINDS)
def test_an_entry_pending_with_another_consumer_is_fenced(backend, queue, what) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    r = app.scripts.run(S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=0, count=10,
                                  max_deliveries=5))  # fmt: skip
    assert [c.run_id for c in r.claimed] == ["a"]
    assert app.scripts.run(_call(what, app, "c1", ent["a"], "a")) == [HoldCode.FENCED]
    st = snapshot(backend.sync, app.keys)
    assert st["stats"]["fenced"] == 1 and "gone" not in st["stats"]
    assert st["pending"] == [("c2", 2)]


@pytest.mark.parametrize("what", KINDS)
def test_reclaimed_and_written_by_the_thief_is_gone_too(backend, queue, what) -> None:
    """The real fence the script cannot tell from a lost reply: the thief finished the run
    before our first call. Only the caller knows whether it sent the outcome before."""
    app, ent = seed_ready(backend, queue, ["a"])
    app.scripts.run(S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=0, count=10,
                              max_deliveries=5))  # fmt: skip
    assert app.scripts.run(_call("ack", app, "c2", ent["a"], "a")) == [HoldCode.OK]
    assert app.scripts.run(_call(what, app, "c1", ent["a"], "a")) == [HoldCode.GONE]


def test_one_batch_mixes_the_three_codes(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a", "b", "c"])
    k = app.keys
    app.scripts.run(S.ack(k, "c1", [(ent["a"], "a")], now_ms=NOW, dedupe_window_ms=60_000))
    # Two consumers' entries: move "b" to c2 by hand (XCLAIM), keep "c" with c1.
    backend.sync.xclaim(k.ready, GROUP, "c2", 0, [ent["b"]])
    pairs = [(ent["a"], "a"), (ent["b"], "b"), (ent["c"], "c")]
    codes = app.scripts.run(S.ack(k, "c1", pairs, now_ms=NOW, dedupe_window_ms=60_000))
    assert codes == [HoldCode.GONE, HoldCode.FENCED, HoldCode.OK]
    st = snapshot(backend.sync, app.keys)
    assert (st["stats"]["acked"], st["stats"]["fenced"], st["stats"]["gone"]) == (2, 1, 1)
