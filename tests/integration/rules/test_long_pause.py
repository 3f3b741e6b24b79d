"""A pause over more slots than one fire call lists still gives every slot one outcome, and
the audit looks back past the rule's last write (review of issue 18, F2)."""

from __future__ import annotations

from zsched import FakeClock
from zsched.rules.audit import SLACK_MS, audit
from zsched.rules.ops import MAX_PAUSED_RECORDS

S = 1000
M = 60_000
T0 = 1_800_000_000_000 // M * M


def _after_grace(app, at_ms):
    """The audit of the slots up to `at_ms` (grace and slack of an every=1 rule past)."""
    (report,) = audit(app, now_ms=at_ms + 500 + SLACK_MS)
    return report


def test_a_pause_of_2500_slots_records_every_one_of_them(backend, queue) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=1, paused=True)  # paused from T0: slots T0 .. T0+2500 s
    clock.set(T0 + 2500 * S)
    assert app.resume_schedule("r")
    (entry,) = app.schedule_history("r")  # one entry for the 2,501 slots: not 1,000 of them
    assert (entry["outcome"], entry["reason"]) == ("skipped", "paused")
    assert (entry["slot_ms"], entry["last_ms"]) == (T0, T0 + 2500 * S)
    report = _after_grace(app, T0 + 2500 * S)
    assert report.checked == 2000 and report.unaccounted == []  # the newest 2,000 audited


def test_a_pause_of_at_most_1000_slots_lists_each_slot(backend, queue) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=1, paused=True)
    clock.set(T0 + (MAX_PAUSED_RECORDS - 1) * S)
    assert app.resume_schedule("r")
    rows = app.schedule_history("r", count=2 * MAX_PAUSED_RECORDS)
    assert sorted(r["slot_ms"] for r in rows) == [T0 + i * S for i in range(MAX_PAUSED_RECORDS)]
    assert all(r["last_ms"] == r["slot_ms"] for r in rows)
    assert _after_grace(app, T0 + (MAX_PAUSED_RECORDS - 1) * S).unaccounted == []


def test_a_year_long_pause_of_a_one_second_rule_is_one_entry(backend, queue) -> None:
    year = 365 * 24 * 3600 * S
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=1, end_at=(T0 + year // 2) / 1000)
    assert app.pause_schedule("r", note="migration", by="ana")
    clock.set(T0 + year)
    assert app.resume_schedule("r")
    (entry,) = app.schedule_history("r")
    assert (entry["slot_ms"], entry["last_ms"]) == (T0, T0 + year // 2)  # up to its end_at
    assert entry["reason"] == "paused by ana: migration" and entry["run_id"] == ""


def test_the_audit_sees_slots_from_before_the_last_edit_pause_and_resume(backend, queue):
    """No dispatcher runs: every slot since the creation lacks an outcome, and an edit of a
    policy must not hide them (the audit's window began at the rule's last write)."""
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=60)
    clock.set(T0 + 10 * M)
    app.schedule("r", "t", every=60, misfire="skip")  # an edit that keeps the slots
    (report,) = audit(app, now_ms=T0 + 13 * M)  # grace 30 s + slack 5 s: up to T0 + 12:25
    assert report.unaccounted == [T0 + i * M for i in range(1, 13)]
    # The pause takes over from the first slot not handled (T0 + 1 min): on resume they are
    # all `skipped: paused`, and the audit, still looking back to the creation, agrees.
    assert app.pause_schedule("r")
    clock.set(T0 + 14 * M)
    assert app.resume_schedule("r")
    (report,) = audit(app, now_ms=T0 + 14 * M + 35_000)
    assert (report.checked, report.unaccounted) == (14, [])
    # An edit of the trigger changes the slots from it on; the old trigger's stay audited
    # (its trigger history) up to its slot already due at the edit, T0 + 15 min, which the
    # edit leaves to fire under the new spec: still without an outcome (no dispatcher).
    clock.set(T0 + 20 * M)
    app.schedule("r", "t", every=120, misfire="skip")
    (report,) = audit(app, now_ms=T0 + 21 * M)
    assert (report.checked, report.unaccounted) == (15, [T0 + 15 * M])


def test_the_cli_history_shows_a_range_entry_as_its_first_and_last_slot(redis_url, queue, capsys):
    import zsched
    from zsched.cli.main import main

    clock = FakeClock(T0)
    app = zsched.App(redis_url, queue=queue, clock=clock)
    app.schedule("r", "t", every=1, paused=True)
    clock.set(T0 + 2500 * S)
    assert app.resume_schedule("r")
    assert main(["schedules", "history", "r", "--redis", redis_url, "--queue", queue]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.split()[:4] == [
        "2027-01-15T08:00:00+00:00",
        "..",
        "2027-01-15T08:41:40+00:00",
        "skipped",
    ]


def test_an_edit_of_a_paused_rules_trigger_keeps_one_outcome_per_slot(backend, queue):
    """Found by the random machine once the audit looked past the last write: the trigger of
    a paused rule edited, the resume recorded the new trigger's slots only from the old one's
    next slot on: the new trigger's slot before it (00:00 Berlin) got no outcome. Now the
    edit records the old trigger's slots of the pause so far, the resume the new one's."""
    from datetime import UTC, datetime

    def at(*ymdh: int) -> int:
        return int(datetime(*ymdh, tzinfo=UTC).timestamp() * 1000)

    clock = FakeClock(at(2026, 10, 24, 12))
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", cron="30 2 * * *", tz="Europe/Berlin")
    assert app.pause_schedule("r")
    clock.set(at(2026, 10, 26, 12))
    app.schedule("r", "t", cron="0 0 * * *", tz="Europe/Berlin")  # still paused
    clock.set(at(2026, 10, 28, 12))
    assert app.resume_schedule("r")
    got = sorted((r["slot_ms"], r["reason"]) for r in app.schedule_history("r"))
    assert got == [  # 02:30 Berlin on the 25th (CEST, the first of the two) and the 26th;
        (at(2026, 10, 25, 0) + 30 * M, "paused"),  # then 00:00 Berlin (CET) on the 27th
        (at(2026, 10, 26, 1) + 30 * M, "paused"),  # and the 28th
        (at(2026, 10, 26, 23), "paused"),
        (at(2026, 10, 27, 23), "paused"),
    ]
    (report,) = audit(app, now_ms=at(2026, 10, 28, 12) + 65_000)
    assert report.unaccounted == [] and report.checked == 4  # both triggers' (the history)


def test_a_long_pause_then_a_trigger_edit_records_the_old_slots_as_one_range(backend, queue):
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=1, paused=True)
    clock.set(T0 + 2500 * S)
    app.schedule("r", "t", every=2, paused=True)  # the old trigger's 2,501 slots: one entry
    clock.set(T0 + 2600 * S)
    assert app.resume_schedule("r")
    rows = sorted((r["slot_ms"], r["last_ms"]) for r in app.schedule_history("r", count=1000))
    assert rows[0] == (T0, T0 + 2500 * S)
    assert rows[1:] == [(T0 + s * S, T0 + s * S) for s in range(2502, 2601, 2)]
    assert _after_grace(app, T0 + 2600 * S).unaccounted == []


def _paused_count(app) -> int:
    return app.status().stats.get("ledger:skipped:paused:r", 0)


def test_stats_count_a_range_entry_by_its_slots(backend, queue) -> None:
    """`stats` (zsched_queue_rule_outcomes_total) counted a range entry as one outcome."""
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=1, paused=True)
    clock.set(T0 + 2500 * S)
    assert app.resume_schedule("r")
    assert _paused_count(app) == 2501
    (entry,) = backend.sync.xrange(app.keys.ledger("r"))
    assert entry[1][b"slots"] == b"2501" and entry[1][b"run_id"] == b""


def test_stats_count_a_cron_range_by_the_trigger_in_force_when_it_was_written(backend, queue):
    """A paused cron rule edited: the old trigger's range is counted by its own slots, the
    new trigger's by its (2 days of `* * * * *` in Berlin, then a day of `*/2 * * * *`)."""
    t0 = 1_800_000_000_000 // (3600 * S) * (3600 * S)
    clock = FakeClock(t0)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", cron="* * * * *", tz="Europe/Berlin", paused=True)
    clock.set(t0 + 2 * 86_400 * S)
    app.schedule("r", "t", cron="*/2 * * * *", tz="Europe/Berlin", paused=True)
    assert _paused_count(app) == 2 * 1440 + 1  # t0 .. t0 + 2 days, both ends
    clock.set(t0 + 5 * 86_400 * S)
    assert app.resume_schedule("r")
    rows = sorted((r["slot_ms"], r["last_ms"]) for r in app.schedule_history("r"))
    assert rows == [(t0, t0 + 2 * 86_400 * S), (t0 + 2 * 86_400 * S + 2 * M, t0 + 5 * 86_400 * S)]
    assert _paused_count(app) == 2 * 1440 + 1 + 3 * 720
