"""ack ends the overlap leases of the rule runs it finishes, in the same call (issue 18).

Before, the worker acknowledged a rule's run, then freed its lease in a second script
(unlease). A worker killed between the two left the lease held by a finished run, and a fire
queued behind it (overlap = queue) waited until the rule's next fire found the lease stale.
Each test here makes the one ack call and nothing else, as a worker that dies right after it.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import NOW, env, seed_ready
from state import snapshot

from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S


def _rule_run(backend, queue, holder="s1@a", extra=(), waiting="s1@b"):
    """A rule run `holder` delivered to c1, holding the lease of rule s1, a fire waiting."""
    app, ent = seed_ready(backend, queue, [holder, *extra])
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), holder)
    r.hset(k.rule_waiting, "s1", f"{len(waiting)}:{waiting}".encode() + env(waiting))
    return app, ent


def _ack(app, consumer, pairs, leases):
    return app.scripts.run(S.ack(app.keys, consumer, pairs, now_ms=NOW, dedupe_window_ms=60_000,
                                 leases=leases))  # fmt: skip


def test_the_ack_of_a_rule_run_frees_its_lease_and_starts_the_waiting_fire(backend, queue):
    app, ent = _rule_run(backend, queue)
    k, r = app.keys, backend.sync
    assert _ack(app, "c1", [(ent["s1@a"], "s1@a")], [("s1", "s1@a")]) == [HoldCode.OK]
    st = snapshot(r, k)
    assert st["done"] == {"s1@a": NOW}
    assert st["delayed"] == {"s1@b": NOW}  # the waiting fire, due now, with the lease
    assert r.get(k.lease("s1")) == b"s1@b"
    assert not r.hexists(k.rule_waiting, "s1")


def test_a_fenced_ack_keeps_the_lease_and_the_waiting_fire(backend, queue) -> None:
    app, ent = _rule_run(backend, queue)
    k, r = app.keys, backend.sync
    assert _ack(app, "zombie", [(ent["s1@a"], "s1@a")], [("s1", "s1@a")]) == [HoldCode.FENCED]
    assert r.get(k.lease("s1")) == b"s1@a"
    assert r.hexists(k.rule_waiting, "s1") and r.hexists(k.runs, "s1@a")
    assert snapshot(r, k)["delayed"] == {}


def test_a_waiting_fire_whose_run_the_same_call_finished_is_dropped(backend, queue) -> None:
    """The waiting fire's id is one the batch just finished (a forced manual fire of its
    instant, acked with the holder): done, so it does not run again."""
    app, ent = _rule_run(backend, queue, extra=["s1@b"])
    k, r = app.keys, backend.sync
    pairs = [(ent["s1@b"], "s1@b"), (ent["s1@a"], "s1@a")]
    assert _ack(app, "c1", pairs, [("s1", "s1@a")]) == [HoldCode.OK, HoldCode.OK]
    assert r.get(k.lease("s1")) is None and not r.hexists(k.rule_waiting, "s1")
    st = snapshot(r, k)
    assert st["delayed"] == {} and st["done"] == {"s1@a": NOW, "s1@b": NOW}


def test_leases_of_several_rules_end_in_one_call(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a", "s2@a", "plain"])
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), "s1@a")
    r.set(k.lease("s2"), "s2@a")
    pairs = [(ent[rid], rid) for rid in ("s1@a", "s2@a", "plain")]
    assert _ack(app, "c1", pairs, [("s2", "s2@a"), ("s1", "s1@a")]) == [HoldCode.OK] * 3
    assert r.get(k.lease("s1")) is None and r.get(k.lease("s2")) is None


def test_an_ack_in_the_five_key_form_leaves_leases_alone(backend, queue) -> None:
    """Clients of the older form (five keys, pairs only) ack as before and unlease alone."""
    app, ent = _rule_run(backend, queue)
    k, r = app.keys, backend.sync
    call = S.ack(k, "c1", [(ent["s1@a"], "s1@a")], now_ms=NOW, dedupe_window_ms=60_000)
    assert app.scripts.run(dataclasses.replace(call, keys=call.keys[:5])) == [HoldCode.OK]
    assert r.get(k.lease("s1")) == b"s1@a" and r.hexists(k.rule_waiting, "s1")
    assert snapshot(r, k)["done"] == {"s1@a": NOW}


@pytest.mark.parametrize("bad", ["lease", "waiting"])
def test_a_lease_key_of_the_wrong_type_is_refused_before_any_write(backend, queue, bad) -> None:
    app, ent = _rule_run(backend, queue)
    k, r = app.keys, backend.sync
    key = k.lease("s1") if bad == "lease" else k.rule_waiting
    r.delete(key)
    r.rpush(key, "x")
    before = snapshot(r, k)
    with pytest.raises(Exception, match="WRONGTYPE"):
        _ack(app, "c1", [(ent["s1@a"], "s1@a")], [("s1", "s1@a")])
    assert snapshot(r, k) == before
