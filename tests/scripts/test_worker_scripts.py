"""ack, retry, dead, release, renew: fenced by ownership, one place at a time."""

from __future__ import annotations

import pytest
from helpers import NOW, env, seed_delayed, seed_ready
from state import snapshot

from zsched.protocol.keys import GROUP
from zsched.protocol.replies import CancelCode, HoldCode
from zsched.store import scripts as S


def test_ack_finishes_the_run_and_records_completion(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a", "b"])
    codes = app.scripts.run(S.ack(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW,
                                  dedupe_window_ms=60_000))  # fmt: skip
    assert codes == [HoldCode.OK]
    st = snapshot(backend.sync, app.keys)
    assert st["done"] == {"a": NOW}
    assert set(st["runs"]) == {"b"} and st["entries"] == ["b"]
    assert [e["run_id"] for e in st["ready"]] == ["b"]
    assert st["pending"] == [("c1", 1)]
    assert st["stats"]["acked"] == 1


def test_ack_from_a_consumer_that_does_not_own_the_entry_is_fenced(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    before = snapshot(backend.sync, app.keys)
    codes = app.scripts.run(S.ack(app.keys, "zombie", [(ent["a"], "a")], now_ms=NOW,
                                  dedupe_window_ms=60_000))  # fmt: skip
    assert codes == [HoldCode.FENCED]
    after = snapshot(backend.sync, app.keys)
    assert after["stats"]["fenced"] == 1
    after["stats"].pop("fenced")
    assert after == before


def test_ack_twice_is_refused_as_gone_the_second_time(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    call = S.ack(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW, dedupe_window_ms=60_000)
    assert app.scripts.run(call) == [HoldCode.OK]
    assert app.scripts.run(call) == [HoldCode.GONE]  # no longer pending (test_gone_codes.py)


def test_ack_trims_completion_records_older_than_the_window(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    backend.sync.zadd(app.keys.done, {f"old{i}": NOW - 70_000 for i in range(5)})
    app.scripts.run(S.ack(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW,
                          dedupe_window_ms=60_000, trim_limit=3))  # fmt: skip
    assert backend.sync.zcard(app.keys.done) == 1 + 2


def test_retry_puts_the_next_attempt_back_in_delayed(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    codes = app.scripts.run(S.retry(app.keys, "c1", [(ent["a"], "a", 5000, env("a", attempt=2))],
                                    now_ms=NOW))  # fmt: skip
    assert codes == [HoldCode.OK]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"a": NOW + 5000}
    assert st["runs"]["a"]["attempt"] == 2
    assert st["ready"] == [] and st["pending"] == [] and st["entries"] == []


def test_retry_by_a_non_owner_is_fenced(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    codes = app.scripts.run(S.retry(app.keys, "other", [(ent["a"], "a", 0, env("a", attempt=2))],
                                    now_ms=NOW))  # fmt: skip
    assert codes == [HoldCode.FENCED]
    assert snapshot(backend.sync, app.keys)["delayed"] == {}


def test_dead_moves_the_run_to_the_dead_letters_with_its_reason(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    codes = app.scripts.run(S.dead(app.keys, "c1", [(ent["a"], "a", "boom", env("a"))],
                                   now_ms=NOW))  # fmt: skip
    assert codes == [HoldCode.OK]
    st = snapshot(backend.sync, app.keys)
    assert st["dead"] == [{"run_id": "a", "reason": "boom"}]
    assert st["runs"] == {} and st["ready"] == [] and st["pending"] == []


def test_release_hands_the_run_back_due_now_with_the_same_attempt(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    assert app.scripts.run(S.release(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW)) == [
        HoldCode.OK
    ]
    st = snapshot(backend.sync, app.keys)
    assert st["delayed"] == {"a": NOW} and st["runs"]["a"].get("attempt", 1) == 1
    assert st["ready"] == [] and st["pending"] == []


def test_renew_keeps_the_hold_only_for_the_owner(backend, queue) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    assert app.scripts.run(S.renew(app.keys, "c1", [ent["a"]])) == [HoldCode.OK]
    assert app.scripts.run(S.renew(app.keys, "zombie", [ent["a"]])) == [HoldCode.FENCED]
    # Renewal never moves ownership nor raises the delivery count.
    assert snapshot(backend.sync, app.keys)["pending"] == [("c1", 1)]


def test_reclaim_takes_over_idle_entries_and_dead_letters_over_delivered_ones(backend, queue):
    app, ent = seed_ready(backend, queue, ["a", "b"])
    r = app.scripts.run(S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=0, count=10,
                                  max_deliveries=5))  # fmt: skip
    assert sorted(c.run_id for c in r.claimed) == ["a", "b"]
    assert all(c.deliveries == 2 for c in r.claimed)
    assert snapshot(backend.sync, app.keys)["pending"] == [("c2", 2), ("c2", 2)]
    # The old owner is fenced now.
    assert app.scripts.run(S.renew(app.keys, "c1", [ent["a"]])) == [HoldCode.FENCED]
    r = app.scripts.run(S.reclaim(app.keys, "c3", now_ms=NOW, min_idle_ms=0, count=10,
                                  max_deliveries=2))  # fmt: skip
    assert r.dead == 2 and r.claimed == []
    st = snapshot(backend.sync, app.keys)
    assert [d["run_id"] for d in st["dead"]] == ["a", "b"]
    assert "delivered 3 times" in st["dead"][0]["reason"]
    assert st["runs"] == {} and st["ready"] == [] and st["pending"] == []


def test_reclaim_leaves_entries_that_are_not_idle_long_enough(backend, queue) -> None:
    app, _ = seed_ready(backend, queue, ["a"])
    r = app.scripts.run(S.reclaim(app.keys, "c2", now_ms=NOW, min_idle_ms=3_600_000, count=10,
                                  max_deliveries=5))  # fmt: skip
    assert r.claimed == [] and r.dead == 0
    assert snapshot(backend.sync, app.keys)["pending"] == [("c1", 1)]


def test_cancel_removes_only_delayed_runs(backend, queue) -> None:
    app, _ = seed_ready(backend, queue, ["ready"])
    app.enqueue("t", None, run_id="later", delay=60)
    assert app.scripts.run(S.cancel(app.keys, "later")) == CancelCode.CANCELLED
    assert app.scripts.run(S.cancel(app.keys, "ready")) == CancelCode.NOT_CANCELLABLE
    assert app.scripts.run(S.cancel(app.keys, "nobody")) == CancelCode.NOT_FOUND
    assert backend.sync.hexists(app.keys.runs, "later") == 0


@pytest.mark.parametrize("name", ["ack", "retry", "dead", "release"])
def test_worker_scripts_refuse_wrong_types_before_writing(backend, queue, name) -> None:
    app, ent = seed_ready(backend, queue, ["a"])
    # ack.lua reads `entries` only for a run dispatched before zsched 0.3: `runs` instead.
    key = app.keys.runs if name == "ack" else app.keys.legacy_entries
    backend.sync.delete(key)
    backend.sync.set(key, "oops")
    calls = {
        "ack": S.ack(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW, dedupe_window_ms=1),
        "retry": S.retry(app.keys, "c1", [(ent["a"], "a", 0, env("a"))], now_ms=NOW),
        "dead": S.dead(app.keys, "c1", [(ent["a"], "a", "x", env("a"))], now_ms=NOW),
        "release": S.release(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW),
    }
    with pytest.raises(Exception, match=f"WRONGTYPE zsched {name}"):
        app.scripts.run(calls[name])
    pend = backend.sync.xpending(app.keys.ready, GROUP)
    assert pend["pending"] == 1


def test_ack_in_any_order_finishes_every_owned_run_and_fences_the_others(backend, queue) -> None:
    """ack.lua reads the pending range between the first and the last pair; pairs out of
    stream order (a foreign client) or not owned are checked one by one, never wrongly."""
    ids = [f"r{i}" for i in range(6)]
    app, ent = seed_ready(backend, queue, ids)
    backend.sync.xclaim(app.keys.ready, GROUP, "c2", 0, [ent["r2"]], justid=True)
    pairs = [ent["r5"], "r5", ent["r0"], "r0", ent["r3"], "r3", ent["r2"], "r2", ent["r1"], "r1"]
    k = app.keys
    sha = backend.sync.script_load(S.source("ack"))
    codes = backend.sync.evalsha(sha, 5, k.ready, k.runs, k.entries, k.done, k.stats, NOW, GROUP,
                                 "c1", 60_000, 200, *pairs)  # fmt: skip
    assert codes == [1, 1, 1, 0, 1]
    # Through the wrapper, which sorts the pairs: the codes come back in the order given.
    got = app.scripts.run(S.ack(k, "c2", [(ent["r4"], "r4"), (ent["r2"], "r2")], now_ms=NOW,
                                dedupe_window_ms=60_000))  # fmt: skip
    assert got == [HoldCode.FENCED, HoldCode.OK]
    st = snapshot(backend.sync, k)
    assert set(st["done"]) == {"r0", "r1", "r2", "r3", "r5"} and set(st["runs"]) == {"r4"}
    assert st["stats"]["acked"] == 5 and st["stats"]["fenced"] == 2


def test_ack_deletes_exactly_the_acked_entries_when_it_trims_whole_stream_nodes(backend, queue):
    """ack.lua frees whole stream nodes below the oldest entry a group still needs (XTRIM
    MINID ~) before its XDEL: a pending entry pins what follows, undelivered entries stay."""
    ids = [f"r{i:03d}" for i in range(250)]
    app = seed_delayed(backend, queue, dict.fromkeys(ids, NOW - 1))
    r, k = backend.sync, app.keys
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(k, now_ms=NOW, limit=1000, max_backlog=0))
    rows = r.xreadgroup(GROUP, "c1", {k.ready: ">"}, count=200)[0][1]  # r200.. not read
    ent = {f[b"run_id"].decode(): e.decode() for e, f in rows}
    first = [(ent[i], i) for i in ids[:150] if i != "r007"]
    assert app.scripts.run(S.ack(k, "c1", first, now_ms=NOW, dedupe_window_ms=60_000)) == [1] * 149
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == ["r007", *ids[150:]]
    rest = [(ent[i], i) for i in ["r007", *ids[150:200]]]
    assert app.scripts.run(S.ack(k, "c1", rest, now_ms=NOW, dedupe_window_ms=60_000)) == [1] * 51
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == ids[200:]
    assert r.xpending(k.ready, GROUP)["pending"] == 0 and r.xlen(k.ready) == 50
    later = r.xreadgroup(GROUP, "c1", {k.ready: ">"}, count=100)[0][1]
    assert [f[b"run_id"].decode() for _e, f in later] == ids[200:]


def _calls(r, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_ack_deletes_entries_older_than_every_needed_one_by_the_trim_alone(real, queue) -> None:
    """An exact XTRIM MINID removes every acknowledged entry below the oldest one a group
    still needs, half a stream node included, so ack.lua runs no XDEL for them (XDEL walks
    an entry's node from its start for each id). Fails with the trim of whole nodes only."""
    ids = [f"r{i:03d}" for i in range(250)]
    app = seed_delayed(real, queue, dict.fromkeys(ids, NOW - 1))
    r, k = real.sync, app.keys
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    app.scripts.run(S.dispatch(k, now_ms=NOW, limit=1000, max_backlog=0))
    rows = r.xreadgroup(GROUP, "c1", {k.ready: ">"}, count=200)[0][1]  # r200.. not read
    ent = {f[b"run_id"].decode(): e.decode() for e, f in rows}
    xdel, xtrim = _calls(r, "xdel"), _calls(r, "xtrim")
    first = [(ent[i], i) for i in ids[:130]]  # 1.3 stream nodes of 100 entries
    assert app.scripts.run(S.ack(k, "c1", first, now_ms=NOW, dedupe_window_ms=60_000)) == [1] * 130
    assert (_calls(r, "xdel"), _calls(r, "xtrim")) == (xdel, xtrim + 1)
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == ids[130:]
    assert r.xlen(k.ready) == 120 and r.xpending(k.ready, GROUP)["pending"] == 70


def test_ack_behind_an_older_pending_entry_deletes_by_xdel_without_a_trim(real, queue) -> None:
    """A slow run's entry, older than the call's, pins the trim: every owned entry is at or
    after it, so ack.lua runs no XTRIM (it would walk that node for nothing) and XDELs them."""
    ids = [f"r{i:02d}" for i in range(40)]
    app, ent = seed_ready(real, queue, ids)
    r, k = real.sync, app.keys
    xdel, xtrim = _calls(r, "xdel"), _calls(r, "xtrim")
    pairs = [(ent[i], i) for i in ids[1:31]]  # r00 stays pending
    assert app.scripts.run(S.ack(k, "c1", pairs, now_ms=NOW, dedupe_window_ms=60_000)) == [1] * 30
    assert (_calls(r, "xdel"), _calls(r, "xtrim")) == (xdel + 1, xtrim)
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == ["r00", *ids[31:]]


def test_ack_deletes_the_owned_entries_the_trim_leaves_in_any_order(backend, queue) -> None:
    """Entries at or after the oldest one still pending stay after the trim and are deleted
    one by one: those found in the pending range (walked from the newest down to the first
    below it) and those outside the range (pairs out of order), never one more."""
    ids = [f"r{i:02d}" for i in range(40)]
    app, ent = seed_ready(backend, queue, ids)
    r, k = backend.sync, app.keys
    order = [*ids[:20], "r35", "r25"]  # the range is r00..r25; r35 is checked alone
    pairs = [x for i in order for x in (ent[i], i)]
    sha = r.script_load(S.source("ack"))
    codes = r.evalsha(sha, 5, k.ready, k.runs, k.entries, k.done, k.stats, NOW, GROUP, "c1",
                      60_000, 200, *pairs)  # fmt: skip
    assert codes == [1] * 22
    left = [i for i in ids[20:] if i not in ("r25", "r35")]
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == left
    assert r.xpending(k.ready, GROUP)["pending"] == len(left)
    assert set(snapshot(r, k)["runs"]) == set(left)


def test_ack_finishes_an_entry_named_twice_in_one_call_once(backend, queue) -> None:
    """A second pair with the same entry id is refused (0), in the pending range or outside it."""
    ids = [f"r{i:02d}" for i in range(12)]
    app, ent = seed_ready(backend, queue, ids)
    r, k = backend.sync, app.keys
    order = [*ids[:10], "r03", "r11", "r11"]  # r03 again in the range; r11 twice outside it
    pairs = [x for i in order for x in (ent[i], i)]
    sha = r.script_load(S.source("ack"))
    codes = r.evalsha(sha, 5, k.ready, k.runs, k.entries, k.done, k.stats, NOW, GROUP, "c1",
                      60_000, 200, *pairs)  # fmt: skip
    assert codes == [1] * 10 + [0, 1, 0]
    st = snapshot(r, k)
    assert set(st["runs"]) == {"r10"} and len(st["done"]) == 11
    assert st["stats"]["acked"] == 11 and st["stats"]["fenced"] == 2
    assert [f[b"run_id"].decode() for _e, f in r.xrange(k.ready)] == ["r10"]


@pytest.mark.parametrize("key", ["ready", "runs", "done", "stats"])
def test_ack_names_a_key_of_the_wrong_type_before_writing(backend, queue, key) -> None:
    """ready is checked by ack.lua's first read of it, the others by TYPE (`entries`, read
    only for runs dispatched before zsched 0.3: tests/scripts/test_legacy_entries.py)."""
    app, ent = seed_ready(backend, queue, ["a"])
    name = getattr(app.keys, key)
    dump = {k: backend.sync.dump(getattr(app.keys, k)) for k in ("runs", "entries", "stats")}
    backend.sync.delete(name)
    backend.sync.set(name, "oops")
    with pytest.raises(Exception, match=f"WRONGTYPE zsched ack: key {name} is a string"):
        app.scripts.run(S.ack(app.keys, "c1", [(ent["a"], "a")], now_ms=NOW, dedupe_window_ms=1))
    for k, v in dump.items():
        assert k == key or backend.sync.dump(getattr(app.keys, k)) == v
    if key != "ready":
        assert backend.sync.xpending(app.keys.ready, GROUP)["pending"] == 1


def _ack_raw(backend, k, consumer: str, pairs: list[str]) -> list[int]:
    sha = backend.sync.script_load(S.source("ack"))
    return backend.sync.evalsha(sha, 5, k.ready, k.runs, k.entries, k.done, k.stats, NOW,  # type: ignore[no-any-return]
                                GROUP, consumer, 60_000, 200, *pairs)  # fmt: skip


def test_ack_whose_range_holds_as_many_rows_as_pairs_but_others_is_still_fenced(backend, queue):
    """The usual call is settled by comparing the range's rows with the pairs one for one; a
    range with as many rows as pairs that are not the same ones (an entry of ours skipped, one
    of another consumer's named) falls back to checking each pair: nothing is wrongly acked."""
    ids = ["r0", "r1", "r2", "r3"]
    app, ent = seed_ready(backend, queue, ids)
    k, r = app.keys, backend.sync
    r.xclaim(k.ready, GROUP, "c2", 0, [ent["r3"]], justid=True)
    # c1 holds r0, r1, r2 (three rows in the range r0..r3); the pairs skip r1 and name r3 (c2's).
    codes = _ack_raw(backend, k, "c1", [ent["r0"], "r0", ent["r2"], "r2", ent["r3"], "r3"])
    assert codes == [1, 1, 0]
    pending = {p["message_id"].decode(): p["consumer"].decode()
               for p in r.xpending_range(k.ready, GROUP, "-", "+", 10)}  # fmt: skip
    assert pending == {ent["r1"]: "c1", ent["r3"]: "c2"}
    st = snapshot(r, k)
    assert set(st["done"]) == {"r0", "r2"} and set(st["runs"]) == {"r1", "r3"}


def test_ack_of_an_entry_named_twice_with_as_many_rows_as_pairs_finishes_it_once(backend, queue):
    """Pairs r0, r2, r2 against the rows r0, r1, r2: the same count, not the same entries."""
    app, ent = seed_ready(backend, queue, ["r0", "r1", "r2"])
    k, r = app.keys, backend.sync
    codes = _ack_raw(backend, k, "c1", [ent["r0"], "r0", ent["r2"], "r2", ent["r2"], "r2"])
    assert codes == [1, 1, 0]
    st = snapshot(r, k)
    assert set(st["runs"]) == {"r1"} and st["stats"]["acked"] == 2
