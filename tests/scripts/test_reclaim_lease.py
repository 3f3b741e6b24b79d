"""reclaim hands a rule's fire past max_deliveries to its caller, whose dead letter ends the
rule's overlap lease in the same call (issue 18, as dead, discard, revoke and cancel:
test_end_lease.py).

Before, reclaim dead-lettered every entry past max_deliveries itself. It is not given the
lease keys of the entries it has yet to find, so a rule run's lease stayed with a run that no
longer lived, and the fire queued behind it (overlap = queue) waited until the rule's next
fire found the lease stale. Now the run stays live and pending for the caller (`over`), which
dead-letters it with dead.lua and the lease key its run id names (Holds.reclaim).
"""

from __future__ import annotations

import dataclasses

from helpers import NOW, env, seed_ready
from state import snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S

WINDOW = 60_000


def _lease(backend, app, holder="s1@a", waiting="s1@b"):
    """Rule s1's lease held by `holder`, a fire `waiting` for it (overlap = queue)."""
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), holder)
    r.hset(k.rule_waiting, "s1", f"{len(waiting)}:{waiting}".encode() + env(waiting))


def _reclaim(app, consumer="c2", max_deliveries=1, hand_over=True):
    """Entries delivered once (to c1) are past max_deliveries 1 once reclaimed (2)."""
    return app.scripts.run(S.reclaim(app.keys, consumer, now_ms=NOW, min_idle_ms=0, count=10,
                                     max_deliveries=max_deliveries, hand_over=hand_over))  # fmt: skip


def _pending(backend, app):
    rows = backend.sync.xpending_range(app.keys.ready, GROUP, "-", "+", 10)
    return [(r["consumer"].decode(), r["times_delivered"]) for r in rows]


def test_reclaim_hands_a_rule_fire_past_max_deliveries_to_the_caller_whose_dead_letter_ends_the_lease(
    backend, queue
) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    k, r = app.keys, backend.sync
    result = _reclaim(app)
    assert result.claimed == [] and result.dead == 0
    assert [(c.entry_id, c.run_id, c.deliveries) for c in result.over] == [(ent["s1@a"], "s1@a", 2)]
    assert result.over[0].envelope == env("s1@a")
    # Not dead yet: live, pending for the caller, its lease and the waiting fire untouched.
    assert _pending(backend, app) == [("c2", 2)] and r.xlen(k.dead) == 0
    assert r.hexists(k.runs, "s1@a") and r.get(k.lease("s1")) == b"s1@a"
    assert r.hexists(k.rule_waiting, "s1") and "reclaimed" not in app.status().stats
    # The caller's dead letter (what Holds.reclaim buffers) ends the lease in that call.
    reason = "delivered 2 times without an ack (max_deliveries 1)"
    call = S.dead(k, "c2", [(ent["s1@a"], "s1@a", reason, result.over[0].envelope)], now_ms=NOW,
                  dedupe_window_ms=WINDOW, leases=[("s1", "s1@a")])  # fmt: skip
    assert app.scripts.run(call) == [HoldCode.OK]
    assert snapshot(r, k)["delayed"] == {"s1@b": NOW}
    assert r.get(k.lease("s1")) == b"s1@b" and not r.hexists(k.rule_waiting, "s1")
    stats = app.status().stats
    assert (stats["dead"], stats["dead:max_deliveries"]) == (1, 1)


def test_a_caller_dead_before_its_dead_letter_leaves_the_run_to_the_next_reclaim(
    backend, queue
) -> None:
    """Until the caller's dead letter the run is live and holds its lease: nothing is stale,
    and the next reclaim (after the caller's hold lapses) hands it over again."""
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert len(_reclaim(app, "c2").over) == 1
    again = _reclaim(app, "c3")
    assert [(c.run_id, c.deliveries) for c in again.over] == [("s1@a", 3)]
    assert _pending(backend, app) == [("c3", 3)] and backend.sync.xlen(app.keys.dead) == 0


def test_reclaim_still_dead_letters_a_plain_run_past_max_deliveries_itself(backend, queue) -> None:
    """A run id without a rule fire's form (`<schedule_id>@...`) holds no lease: dead here."""
    app, _ = seed_ready(backend, queue, ["plain", "@x", "s1@a"])
    result = _reclaim(app)
    assert result.dead == 2 and [c.run_id for c in result.over] == ["s1@a"]
    dead = snapshot(backend.sync, app.keys)["dead"]
    assert sorted(d["run_id"] for d in dead) == ["@x", "plain"]
    assert app.status().stats["dead:max_deliveries"] == 2


def test_reclaim_in_the_older_form_dead_letters_every_entry_and_leaves_the_lease(
    backend, queue
) -> None:
    """Clients of the 7-argument form (no hand_over) get the 4-element reply as before; the
    lease is left to the rule's next fire (found stale)."""
    app, _ = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    call = S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=0, count=10, max_deliveries=1)
    old = dataclasses.replace(call, args=call.args[:7], decode=list)
    reply = app.scripts.run(old)
    assert len(reply) == 4 and reply[1] == [] and reply[2] == 1
    k, r = app.keys, backend.sync
    assert r.xlen(k.dead) == 1 and not r.hexists(k.runs, "s1@a")
    assert r.get(k.lease("s1")) == b"s1@a" and r.hexists(k.rule_waiting, "s1")
    assert _reclaim(app, hand_over=False).over == []


def test_reclaim_hands_over_only_entries_past_max_deliveries(backend, queue) -> None:
    app, _ = seed_ready(backend, queue, ["s1@a"])
    result = _reclaim(app, max_deliveries=5)
    assert [c.run_id for c in result.claimed] == ["s1@a"] and result.over == []
