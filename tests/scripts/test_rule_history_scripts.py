"""schedule.lua and unschedule.lua with the trigger history (`rule_triggers`), fire.lua's
range records with their number of slots, and the arity of older callers of all three."""

from __future__ import annotations

from zsched.store import scripts as S

NOW = 1_800_000_000_000


def _raw(app, call, n_keys=None, n_args=None):
    """Run `call` as a caller of fewer KEYS / ARGV would (an older client): EVAL as is."""
    keys = call.keys[:n_keys] if n_keys is not None else call.keys
    args = call.args[:n_args] if n_args is not None else call.args
    return app.redis.eval(S.source(call.name), len(keys), *keys, *args)


def test_an_edit_stores_the_history_with_the_spec_and_only_then(backend, queue) -> None:
    app = backend.app(queue)
    k, r = app.keys, app.redis
    r.hset(k.rule_triggers, "s", b"stale")  # left by a rule of the same id: a create drops it
    assert app.scripts.run(S.schedule(k, "s", b"a", 5, b"st", expected=(b"", None, b""),
                                      triggers=b"ignored")) == 1  # fmt: skip
    assert not r.hexists(k.rule_triggers, "s")
    edit = S.schedule(k, "s", b"b", 6, b"st2", expected=(b"a", 5, b"st"), triggers=b"h1")
    assert app.scripts.run(edit) == 2 and r.hget(k.rule_triggers, "s") == b"h1"
    stale = S.schedule(k, "s", b"c", 7, b"st3", expected=(b"a", 5, b"st"), triggers=b"h2")
    assert app.scripts.run(stale) == 3  # compare-and-set failed: nothing written
    assert (r.hget(k.rules, "s"), r.hget(k.rule_triggers, "s")) == (b"b", b"h1")
    keep = S.schedule(k, "s", b"d", 8, b"st4", expected=(b"b", 6, b"st2"))  # b"": keep
    assert app.scripts.run(keep) == 2 and r.hget(k.rule_triggers, "s") == b"h1"
    assert app.scripts.run(S.unschedule(k, "s")) == 1
    assert not r.hexists(k.rule_triggers, "s")


def test_older_callers_of_schedule_and_unschedule_keep_working(backend, queue) -> None:
    app = backend.app(queue)
    k, r = app.keys, app.redis
    r.hset(k.rule_triggers, "s", b"h")
    create = S.schedule(k, "s", b"a", 5, b"st", expected=(b"", None, b""), triggers=b"x")
    assert _raw(app, create, n_keys=5, n_args=8) == 1  # 5 keys, 8 args: no history touched
    edit = S.schedule(k, "s", b"b", 6, b"st2", expected=(b"a", 5, b"st"), triggers=b"x")
    assert _raw(app, edit, n_keys=5, n_args=8) == 2
    assert _raw(app, S.schedule(k, "s", b"c", -1), n_keys=5) == 2  # no expected at all
    assert r.hget(k.rule_triggers, "s") == b"h"
    assert _raw(app, S.unschedule(k, "s"), n_keys=7) == 1
    assert not r.hexists(k.rules, "s") and r.hget(k.rule_triggers, "s") == b"h"


def _fire_records(app, records):
    k = app.keys
    app.scripts.run(S.schedule(k, "s", b"a", -1, b"st", expected=(b"", None, b"")))
    args = S.FireArgs("s", b"a", None, b"st", None, b"st", None, "allow", 1000, [], records)
    return app.scripts.run(S.fire(k, args, now_ms=NOW, dedupe_window_ms=60_000,
                                  ledger_maxlen=100, ledger_max_age_ms=0))  # fmt: skip


def test_a_range_record_counts_its_slots_and_an_older_callers_counts_once(backend, queue):
    app = backend.app(queue)
    k, r = app.keys, app.redis
    assert _fire_records(app, [(1000, "skipped", "paused", "2501", 2_501_000)]).ok
    (_, entry), = r.xrange(k.ledger("s"))  # fmt: skip
    assert (entry[b"run_id"], entry[b"slots"], entry[b"last_ms"]) == (b"", b"2501", b"2501000")
    assert r.hget(k.stats, "ledger:skipped:paused:s") == b"2501"
    r.delete(k.ledger("s"), k.stats, k.rules, k.rule_state)
    assert _fire_records(app, [(1000, "skipped", "paused", "", 2_501_000)]).ok
    (_, entry), = r.xrange(k.ledger("s"))  # fmt: skip
    assert b"slots" not in entry and entry[b"run_id"] == b""
    assert r.hget(k.stats, "ledger:skipped:paused:s") == b"1"
