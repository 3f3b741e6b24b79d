"""dead, discard, revoke and cancel end a rule run's overlap lease in the call that ends the run
(issue 18), as ack does (test_ack_lease.py).

Before, the worker dead-lettered (or discarded) a rule's run and App.cancel revoked one, then
freed the lease in a second script (unlease). A process killed between the two left the lease
held by a run that no longer lived, and a fire queued behind it (overlap = queue) waited until
the rule's next fire found the lease stale. Each test here makes the one call and nothing
else, as a process that dies right after it.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import NOW, env, seed_delayed, seed_ready
from state import snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import CancelCode, HoldCode
from zsched.runs import controls as C
from zsched.store import scripts as S

WINDOW = 60_000


def _lease(backend, app, holder="s1@a", waiting="s1@b"):
    """Rule s1's lease held by `holder`, a fire `waiting` for it (overlap = queue)."""
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), holder)
    r.hset(k.rule_waiting, "s1", f"{len(waiting)}:{waiting}".encode() + env(waiting))


def _started(backend, app, run_id="s1@b"):
    """The waiting fire started: due now, holding the lease, no longer waiting."""
    k, r = app.keys, backend.sync
    return (snapshot(r, k)["delayed"] == {run_id: NOW} and r.get(k.lease("s1")) == run_id.encode()
            and not r.hexists(k.rule_waiting, "s1"))  # fmt: skip


def _untouched(backend, app, holder="s1@a"):
    k, r = app.keys, backend.sync
    return r.get(k.lease("s1")) == holder.encode() and r.hexists(k.rule_waiting, "s1")


def _dead(app, consumer, entry, run_id, leases):
    group = (entry, run_id, "failed: boom", env(run_id))
    return app.scripts.run(S.dead(app.keys, consumer, [group], now_ms=NOW,
                                  dedupe_window_ms=WINDOW, leases=leases))  # fmt: skip


def _discard(app, consumer, entry, run_id, leases):
    return app.scripts.run(C.discard(app.keys, consumer, [(entry, run_id)], now_ms=NOW,
                                     dedupe_window_ms=WINDOW, leases=leases))  # fmt: skip


# -- dead.lua -------------------------------------------------------------------------------


def test_the_dead_letter_of_a_rule_run_frees_its_lease_and_starts_the_waiting_fire(
    backend, queue
) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert _dead(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")]) == [HoldCode.OK]
    assert backend.sync.xlen(app.keys.dead) == 1
    assert _started(backend, app)


def test_a_fenced_dead_letter_keeps_the_lease_and_the_waiting_fire(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert _dead(app, "zombie", ent["s1@a"], "s1@a", [("s1", "s1@a")]) == [HoldCode.FENCED]
    assert _untouched(backend, app) and snapshot(backend.sync, app.keys)["delayed"] == {}


def test_a_dead_letter_drops_a_waiting_fire_whose_run_id_is_done(backend, queue) -> None:
    """As ack and unlease: the waiting fire's id was run meanwhile (a forced manual fire of its
    instant, done): it does not run again."""
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    backend.sync.zadd(app.keys.done, {"s1@b": NOW - 1})
    assert _dead(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")]) == [HoldCode.OK]
    r = backend.sync
    assert r.get(app.keys.lease("s1")) is None and not r.hexists(app.keys.rule_waiting, "s1")
    assert snapshot(r, app.keys)["delayed"] == {}


def test_a_dead_letter_in_the_five_key_form_leaves_leases_alone(backend, queue) -> None:
    """Clients of the older form (five keys, groups only) dead-letter as before, then unlease."""
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    call = S.dead(app.keys, "c1", [(ent["s1@a"], "s1@a", "failed: x", env("s1@a"))], now_ms=NOW)
    assert app.scripts.run(dataclasses.replace(call, keys=call.keys[:5])) == [HoldCode.OK]
    assert _untouched(backend, app) and backend.sync.xlen(app.keys.dead) == 1


def test_a_dead_letter_of_several_runs_ends_only_the_leases_named(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a", "s2@a", "plain"])
    k, r = app.keys, backend.sync
    r.set(k.lease("s1"), "s1@a")
    r.set(k.lease("s2"), "s2@a")
    groups = [(ent[rid], rid, "failed: x", env(rid)) for rid in ("s1@a", "s2@a", "plain")]
    call = S.dead(k, "c1", groups, now_ms=NOW, dedupe_window_ms=WINDOW, leases=[("s2", "s2@a")])
    assert app.scripts.run(call) == [HoldCode.OK] * 3
    assert r.get(k.lease("s1")) == b"s1@a" and r.get(k.lease("s2")) is None


@pytest.mark.parametrize("bad", ["lease", "waiting", "done"])
def test_a_dead_letters_lease_key_of_the_wrong_type_is_refused_before_any_write(
    backend, queue, bad
) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    k, r = app.keys, backend.sync
    key = {"lease": k.lease("s1"), "waiting": k.rule_waiting, "done": k.done}[bad]
    r.delete(key)
    r.rpush(key, "x")
    before = (r.hgetall(k.runs), r.xpending(k.ready, GROUP)["pending"], r.hgetall(k.legacy_entries))
    with pytest.raises(Exception, match="WRONGTYPE"):
        _dead(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")])
    after = (r.hgetall(k.runs), r.xpending(k.ready, GROUP)["pending"], r.hgetall(k.legacy_entries))
    assert after == before and not r.exists(k.dead)


@pytest.mark.parametrize("cut", ["tail", "keys"])
def test_a_dead_letter_with_a_malformed_lease_form_is_refused_before_any_write(
    backend, queue, cut
) -> None:
    """Lease keys without their (window, pairs) tail, or 6 to 8 keys: an error naming the
    expected form, nothing written."""
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    group = (ent["s1@a"], "s1@a", "failed: x", env("s1@a"))
    call = S.dead(app.keys, "c1", [group], now_ms=NOW, dedupe_window_ms=WINDOW,
                  leases=[("s1", "s1@a")])  # fmt: skip
    bad = (dataclasses.replace(call, args=call.args[:-3]) if cut == "tail"
           else dataclasses.replace(call, keys=call.keys[:7], args=call.args[:-3]))  # fmt: skip
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(Exception, match="expected up to 1000 groups"):
        app.scripts.run(bad)
    assert snapshot(backend.sync, app.keys) == before and _untouched(backend, app)


# -- discard.lua ----------------------------------------------------------------------------


def test_the_discard_of_a_cancelled_rule_run_frees_its_lease_and_starts_the_waiting_fire(
    backend, queue
) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert _discard(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")]) == [HoldCode.OK]
    assert backend.sync.zscore(app.keys.cancelled, "s1@a") == NOW
    assert _started(backend, app)


def test_a_fenced_discard_keeps_the_lease(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert _discard(app, "zombie", ent["s1@a"], "s1@a", [("s1", "s1@a")]) == [HoldCode.FENCED]
    assert _untouched(backend, app)


def test_a_discard_in_the_five_key_form_leaves_leases_alone(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    call = C.discard(app.keys, "c1", [(ent["s1@a"], "s1@a")], now_ms=NOW, dedupe_window_ms=WINDOW)
    assert app.scripts.run(dataclasses.replace(call, keys=call.keys[:5])) == [HoldCode.OK]
    assert _untouched(backend, app)


# -- revoke.lua (App.cancel) ----------------------------------------------------------------


def _revoke(app, run_id):
    return app.scripts.run(C.revoke(app.keys, run_id, now_ms=NOW, dedupe_window_ms=WINDOW))


def test_revoking_a_delayed_rule_run_frees_its_lease_and_starts_the_waiting_fire(
    backend, queue
) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    _lease(backend, app)
    assert _revoke(app, "s1@a").outcome is C.CancelOutcome.CANCELLED_DELAYED
    assert _started(backend, app)


def test_revoking_a_ready_rule_run_frees_its_lease_and_starts_the_waiting_fire(
    backend, queue
) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW - 1})
    backend.sync.xgroup_create(app.keys.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(app.keys, now_ms=NOW, limit=10, max_backlog=0))
    _lease(backend, app)
    assert _revoke(app, "s1@a").outcome is C.CancelOutcome.CANCELLED_READY
    assert _started(backend, app)


def test_a_cancel_request_for_a_running_rule_run_keeps_its_lease(backend, queue) -> None:
    """Running: the worker holding it ends it (discard, above) and its lease then."""
    app, _ = seed_ready(backend, queue, ["s1@a"])
    _lease(backend, app)
    assert _revoke(app, "s1@a").outcome is C.CancelOutcome.REQUESTED
    assert _untouched(backend, app)


def test_revoking_a_run_that_does_not_hold_the_lease_leaves_it_alone(backend, queue) -> None:
    """A backfilled slot (no lease) of a rule whose live run holds it."""
    app = seed_delayed(backend, queue, {"s1@old": NOW + 60_000})
    _lease(backend, app)
    assert _revoke(app, "s1@old").outcome is C.CancelOutcome.CANCELLED_DELAYED
    assert _untouched(backend, app)


def test_revoke_in_the_eight_key_form_leaves_leases_alone(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    _lease(backend, app)
    call = C.revoke(app.keys, "s1@a", now_ms=NOW, dedupe_window_ms=WINDOW)
    old = dataclasses.replace(call, keys=call.keys[:8], args=call.args[:4])
    assert app.scripts.run(old).outcome is C.CancelOutcome.CANCELLED_DELAYED
    assert _untouched(backend, app)


def test_revoke_refuses_lease_keys_without_a_schedule_id(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    call = C.revoke(app.keys, "s1@a", now_ms=NOW, dedupe_window_ms=WINDOW)
    before = snapshot(backend.sync, app.keys)
    with pytest.raises(Exception, match="schedule_id"):
        app.scripts.run(dataclasses.replace(call, args=call.args[:4]))
    assert snapshot(backend.sync, app.keys) == before


def test_a_run_id_without_an_at_sign_is_revoked_in_the_eight_key_form(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"plain": NOW + 60_000})
    call = C.revoke(app.keys, "plain", now_ms=NOW, dedupe_window_ms=WINDOW)
    assert len(call.keys) == 8 and len(call.args) == 4
    assert app.scripts.run(call).outcome is C.CancelOutcome.CANCELLED_DELAYED


# -- cancel.lua (the older, delayed-only cancel) --------------------------------------------


def test_cancel_of_a_delayed_rule_run_frees_its_lease_and_starts_the_waiting_fire(
    backend, queue
) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    _lease(backend, app)
    call = S.cancel(app.keys, "s1@a", now_ms=NOW, dedupe_window_ms=WINDOW)
    assert app.scripts.run(call) == CancelCode.CANCELLED
    assert _started(backend, app)


def test_cancel_in_the_two_key_form_leaves_leases_alone(backend, queue) -> None:
    app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    _lease(backend, app)
    call = S.cancel(app.keys, "s1@a", now_ms=NOW, dedupe_window_ms=WINDOW)
    old = dataclasses.replace(call, keys=call.keys[:2], args=call.args[:1])
    assert app.scripts.run(old) == CancelCode.CANCELLED
    assert _untouched(backend, app) and snapshot(backend.sync, app.keys)["delayed"] == {}


@pytest.mark.parametrize("how", ["dead", "discard", "revoke"])
def test_ending_a_rule_runs_lease_publishes_on_wake(backend, queue, how) -> None:
    """A dispatcher sleeping while a catch-up replay waits for the lease hears of its end
    (as after ack and unlease: test_rule_ops_wake.py)."""
    if how == "revoke":
        app = seed_delayed(backend, queue, {"s1@a": NOW + 60_000})
    else:
        app, ent = seed_ready(backend, queue, ["s1@a"])
    backend.sync.set(app.keys.lease("s1"), "s1@a")  # no fire waits: only the free is heard
    sub = backend.sync.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(app.keys.wake)
    try:
        if how == "dead":
            _dead(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")])
        elif how == "discard":
            _discard(app, "c1", ent["s1@a"], "s1@a", [("s1", "s1@a")])
        else:
            _revoke(app, "s1@a")
        msg = None
        for _ in range(50):  # bounded: the PUBLISH ran inside the call that just returned
            msg = sub.get_message(timeout=0.1)
            if msg is not None:
                break
        assert msg is not None and int(msg["data"]) == NOW
    finally:
        sub.close()
    assert backend.sync.get(app.keys.lease("s1")) is None
