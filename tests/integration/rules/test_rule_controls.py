"""Rule controls: run a rule now (its own run id, ledger outcome `manual`, the rule's slots
unchanged, overlap respected unless forced) and pause with a note (kept with the time, shown
by the listing and in the ledger's skipped entries)."""

from __future__ import annotations

import json
import re

import pytest

import zsched
from zsched import FakeClock, ManualOutcome
from zsched.cli.main import main
from zsched.rules.controls import manual_run_id
from zsched.rules.triggers import slot_run_id
from zsched.store import scripts as S
from zsched.store.partitions import partition_for, run_partition

H = 3_600_000
M = 60_000
T0 = 1_800_000_000_000 // H * H


def rule_state(backend, app, sid):
    k = app.keys
    return (backend.sync.hget(k.rules, sid), backend.sync.hget(k.rule_state, sid),
            backend.sync.zscore(k.rule_next, sid))  # fmt: skip


async def test_run_now_fires_once_with_its_own_id_and_leaves_the_slots_alone(backend, queue):
    clock = FakeClock(T0 + 10 * M)
    app = backend.app(queue, clock=clock)
    ran = []

    @app.task(name="report")
    def report(payload):
        ran.append((zsched.current_run().run_id, payload, zsched.current_run().schedule_id))

    app.schedule("nightly", "report", cron="0 2 * * *", tz="Europe/Berlin", payload={"p": 1})
    before = rule_state(backend, app, "nightly")
    res = app.run_schedule_now("nightly")
    assert (res.outcome, res.started) == (ManualOutcome.STARTED, True)
    assert res.run_id == manual_run_id("nightly", T0 + 10 * M) == "nightly@manual:" + \
        zsched.rules.dst.iso_utc(T0 + 10 * M)  # fmt: skip
    assert rule_state(backend, app, "nightly") == before
    (entry,) = app.schedule_history("nightly")
    assert (entry["outcome"], entry["run_id"], entry["slot_ms"]) == ("manual", res.run_id,
                                                                     T0 + 10 * M)  # fmt: skip
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    await d.close()
    await w.close()
    assert ran == [(res.run_id, {"p": 1}, "nightly")]
    assert app.get_run(res.run_id).state == "done"
    assert rule_state(backend, app, "nightly")[2] == before[2]  # the next slot has not moved
    info = app.schedules()[0]
    assert (info.fired, info.last_outcome) == (0, "manual")


def test_overlap_is_respected_unless_forced(backend, queue) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("sweep", "t", every=3600, overlap="skip")
    first = app.run_schedule_now("sweep")
    assert first.started
    lease = app.keys.lease("sweep")
    assert backend.sync.get(lease) == first.run_id.encode()
    clock.set(T0 + 1000)
    second = app.run_schedule_now("sweep")
    assert (second.outcome, second.started) == (ManualOutcome.SKIPPED, False)
    assert not backend.sync.hexists(app.keys.runs, second.run_id)
    clock.set(T0 + 2000)
    forced = app.run_schedule_now("sweep", force=True)
    assert forced.started and backend.sync.hexists(app.keys.runs, forced.run_id)
    assert backend.sync.get(lease) == first.run_id.encode()  # a forced run takes no lease
    outcomes = [(e["outcome"], e["reason"][:8]) for e in app.schedule_history("sweep")]
    assert outcomes == [("manual", ""), ("skipped", "overlap:"), ("manual", "")]


def test_overlap_queue_waits_behind_the_running_fire(backend, queue) -> None:
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("q", "t", every=3600, overlap="queue")
    assert app.run_schedule_now("q").started
    clock.set(T0 + 5)
    assert app.run_schedule_now("q").outcome is ManualOutcome.QUEUED
    assert backend.sync.hexists(app.keys.rule_waiting, "q")


def test_a_forced_fire_of_the_instant_a_manual_fire_waits_for_is_that_fire(backend, queue):
    """Found by make model (catch_up x queue): a manual fire waited (overlap queue) and a
    forced one of the same instant ran the same run id. The waiting fire stayed, and whether
    it ran again hung on which of two writes came first: the forced run's dead letter before
    the holder's unlease (its id then neither live nor done), or after. Now the forced fire
    is the waiting one: it waits no more, however the forced run ends."""
    clock = FakeClock(T0)
    app = backend.app(queue, clock=clock)
    app.schedule("q", "t", every=3600, overlap="queue")
    holder = app.run_schedule_now("q")
    clock.set(T0 + 5)
    assert app.run_schedule_now("q").outcome is ManualOutcome.QUEUED
    forced = app.run_schedule_now("q", force=True)
    assert forced.outcome is ManualOutcome.STARTED
    assert not backend.sync.hexists(app.keys.rule_waiting, "q")
    backend.sync.hdel(app.keys.runs, forced.run_id)  # it went dead (the dead letter's effect)
    released, started = app.scripts.run(S.unlease(app.keys, "q", holder.run_id, 1000, now_ms=T0 + 5,
                                                  dedupe_window_ms=3_600_000))  # fmt: skip
    assert (released, started) == (True, "")
    assert backend.sync.get(app.keys.lease("q")) is None


def test_the_same_instant_twice_is_a_duplicate_and_unknown_rules_raise(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(T0))
    app.schedule("r", "t", every=3600)
    assert app.run_schedule_now("r").started
    assert app.run_schedule_now("r").outcome is ManualOutcome.DUPLICATE
    with pytest.raises(zsched.ScheduleNotFound):
        app.run_schedule_now("nope")


def test_a_manual_fire_routes_with_its_rule_on_a_partitioned_queue() -> None:
    rid = manual_run_id("nightly", T0)
    assert all(run_partition(rid, n) == partition_for("nightly", n) for n in (2, 3, 8))


def test_a_paused_rule_runs_now_too(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(T0))
    app.schedule("r", "t", every=60)
    assert app.pause_schedule("r")
    assert app.run_schedule_now("r").started
    assert app.schedules()[0].paused


def test_a_pause_note_is_kept_shown_and_written_to_the_skipped_entries(backend, queue) -> None:
    clock = FakeClock(T0 + 10_000)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=60)
    assert app.pause_schedule("r", note="deploy 4.2 (ops: ana)")
    info = app.schedules()[0]
    assert (info.paused, info.paused_ms, info.pause_note) == (True, T0 + 10_000,
                                                              "deploy 4.2 (ops: ana)")  # fmt: skip
    clock.set(T0 + 200_000)
    assert app.resume_schedule("r")
    skipped = [e for e in app.schedule_history("r") if e["outcome"] == "skipped"]
    assert [e["slot_ms"] for e in reversed(skipped)] == [T0 + 60_000, T0 + 120_000, T0 + 180_000]
    assert {e["reason"] for e in skipped} == {"paused: deploy 4.2 (ops: ana)"}
    assert {e["run_id"] for e in skipped} == {slot_run_id("r", T0 + i * M) for i in (1, 2, 3)}
    info = app.schedules()[0]
    assert (info.paused, info.paused_ms, info.pause_note) == (False, None, None)
    with pytest.raises(zsched.RuleError, match="pause note"):
        app.pause_schedule("r", note="x" * 501)


def test_who_paused_is_kept_shown_and_written_to_the_skipped_entries(backend, queue) -> None:
    clock = FakeClock(T0 + 10_000)
    app = backend.app(queue, clock=clock)
    app.schedule("r", "t", every=60)
    app.schedule("s", "t", every=60)
    assert app.pause_schedule("r", note="deploy: 4.2", by="ana")
    assert app.pause_schedule("s", by="bob")
    info = {i.schedule_id: i for i in app.schedules()}
    assert (info["r"].paused_by, info["r"].pause_note) == ("ana", "deploy: 4.2")
    assert (info["s"].paused_by, info["s"].pause_note) == ("bob", None)
    assert info["r"].as_dict()["paused_by"] == "ana"
    assert not app.pause_schedule("r", by="carol")  # already paused: the first pause stays
    assert next(i for i in app.schedules() if i.schedule_id == "r").paused_by == "ana"
    clock.set(T0 + 130_000)
    assert app.resume_schedule("r") and app.resume_schedule("s")
    reasons = {sid: {e["reason"] for e in app.schedule_history(sid) if e["outcome"] == "skipped"}
               for sid in ("r", "s")}  # fmt: skip
    assert reasons == {"r": {"paused by ana: deploy: 4.2"}, "s": {"paused by bob"}}
    assert all(i.paused_by is None for i in app.schedules())
    for bad in ("a:b", "x" * 101, "line\nbreak", 7):
        with pytest.raises(zsched.RuleError, match="who paused"):
            app.pause_schedule("r", by=bad)  # type: ignore[arg-type]
    assert not any(i.paused for i in app.schedules())


def test_the_cli_runs_a_rule_now_and_pauses_with_a_note(redis_url, queue, capsys, monkeypatch):
    monkeypatch.setenv("LOGNAME", "os-user")  # getpass.getuser() reads it first
    base = ["--redis", redis_url, "--queue", queue]
    app = zsched.App(redis_url, queue=queue)
    app.schedule("nightly", "t", cron="0 2 * * *", tz="UTC", overlap="skip")
    assert main(["schedules", "run", "nightly", *base, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "started" and out["run_id"].startswith("nightly@manual:")
    assert main(["schedules", "run", "nightly", *base]) == 1
    assert capsys.readouterr().out.startswith("skipped: nightly@manual:")
    assert main(["schedules", "run", "nightly", "--force", *base]) == 0
    capsys.readouterr()
    assert main(["schedules", "pause", "nightly", "--note", "quiet for the deploy", *base]) == 0
    capsys.readouterr()
    assert main(["schedules", "list", *base]) == 0
    assert "paused since " in (text := capsys.readouterr().out) and "quiet for the deploy" in text
    assert main(["schedules", "list", *base, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["pause_note"] == "quiet for the deploy" and row["paused_ms"] > 0
    assert row["paused_by"] == "os-user"  # the OS user (LOGNAME here), unless --by says otherwise
    assert main(["schedules", "resume", "nightly", *base]) == 0
    capsys.readouterr()
    assert main(["schedules", "pause", "nightly", "--by", "ana", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["by"] == "ana"
    assert main(["schedules", "list", *base]) == 0
    assert re.search(r"paused since \S+ by ana: \(no note\)", capsys.readouterr().out)
    assert main(["schedules", "resume", "nightly", *base]) == 0
    assert main(["schedules", "pause", "nightly", "--by", "", *base]) == 0  # nobody named
    assert app.schedules()[0].paused_by is None
    app.close()
