"""The console's run controls over HTTP, against the suite's real redis-server: reschedule,
run a rule now (overlap respected, or forced), pause a rule with a note, pause and resume the
queue with a note; the run page's cancelled state, kept outcomes and limit wait; dispatcher
heartbeats on the overview. Each action's effect is read back through the public API."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from console_seed import CREDS, XSS, Seeded, server_ms
from starlette.testclient import TestClient
from test_console_http import AUTH, console, flash, post

import zsched
from zsched import FakeClock
from zsched.observability.metrics import Metrics
from zsched.web import create_app
from zsched.worker import limits as L


def test_reschedule_moves_a_delayed_run_and_says_why_others_stay(client, seeded: Seeded) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    r = post(c, q, "reschedule", {"run_id": "send-0005", "at": "2030-01-02T03:04"})
    assert r.headers["location"] == f"/q/{q}/run?id=send-0005"
    assert flash(c, r) == "run send-0005 now waits until 2030-01-02T03:04:00Z"
    assert app.get_run("send-0005").run_at == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    before = app.get_run("send-0006").run_at
    r = post(c, q, "reschedule", {"run_id": "send-0006", "in": "5"})
    assert flash(c, r).startswith("run send-0006 now waits until ")
    after = app.get_run("send-0006").run_at
    assert after is not None and before is not None and after < before  # an hour+ earlier
    assert "give a new due time" in flash(c, post(c, q, "reschedule", {"run_id": "send-0007"}))
    bad = post(c, q, "reschedule", {"run_id": "send-0007", "at": "soon"})
    assert "new due time: expected a date and time" in flash(c, bad)
    dead = post(c, q, "reschedule", {"run_id": "boom-0", "in": "1"})
    assert flash(c, dead) == "run boom-0 was not moved: it is a dead letter (replay it instead)"
    gone = post(c, q, "reschedule", {"run_id": "nope", "in": "1"})
    assert flash(c, gone) == "no delayed run nope: never enqueued, cancelled, or gone"
    page = c.get(f"/q/{q}/run?id=send-0007", headers=AUTH).text
    assert 'id="reschedule"' in page and 'id="cancel"' in page


def test_cancel_says_what_it_did_and_the_run_page_shows_the_cancelled_state(client, seeded):
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    r = post(c, q, "cancel", {"run_id": "send-0003"})
    assert flash(c, r) == "cancelled run send-0003: it was waiting for its time and will not run"
    assert app.get_run("send-0003").state == "cancelled"
    again = post(c, q, "cancel", {"run_id": "send-0003"})
    assert flash(c, again) == "run send-0003 was cancelled already"
    assert flash(c, post(c, q, "cancel", {"run_id": "nope"})).startswith("no run nope")
    page = c.get(f"/q/{q}/run?id=send-0003", headers=AUTH).text
    assert re.search(r'id="state">cancelled<', page) and 'id="cancelled">cancelled at' in page
    assert 'id="cancel"' not in page and 'id="reschedule"' not in page


def test_run_now_respects_overlap_unless_forced(client, seeded) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    app.schedule("solo", "report", every=3600, overlap="skip")
    r = post(c, q, "run-now", {"schedule_id": "solo"})
    assert r.headers["location"] == f"/q/{q}/rule?id=solo"
    started = flash(c, r)
    m = re.fullmatch(r"rule solo fired now as (solo@manual:\S+)", started)
    assert m and app.get_run(m.group(1)).state == "scheduled"
    skipped = flash(c, post(c, q, "run-now", {"schedule_id": "solo"}))
    assert skipped.startswith("rule solo was not fired: its previous run still holds the lease")
    forced = flash(c, post(c, q, "run-now", {"schedule_id": "solo", "force": "1"}))
    assert forced.startswith("rule solo fired now as solo@manual:")
    assert [h["outcome"] for h in app.schedule_history("solo")].count("manual") == 2
    page = c.get(f"/q/{q}/rule?id=solo", headers=AUTH).text
    assert "run now by hand as solo@manual:" in page and 'name="force"' in page
    assert "no schedule" in flash(c, post(c, q, "run-now", {"schedule_id": "nope"}))


def test_a_rule_paused_with_a_note_shows_it_and_the_ledger_reads_in_words(client, seeded):
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    note = "deploy " + XSS
    r = post(c, q, "pause", {"schedule_id": "tick", "note": note})
    assert flash(c, r) == "paused rule tick"
    info = next(i for i in app.schedules() if i.schedule_id == "tick")
    assert (info.paused, info.pause_note) == (True, note) and info.paused_ms
    esc = "deploy &lt;script&gt;window.__xss=1&lt;/script&gt;"
    rules = c.get(f"/q/{q}/rules", headers=AUTH).text
    assert re.search(
        r"paused since <time[^>]+>[^<]+</time> by <span class=\"paused-by\">token</span>: "
        r"<span class=\"pause-note\">" + esc,
        rules,
    )
    rule = c.get(f"/q/{q}/rule?id=tick", headers=AUTH).text
    assert 'id="pause-note">' + esc in rule and "<script>window.__xss" not in rule
    too_long = post(c, q, "pause", {"schedule_id": "nightly", "note": "x" * 501})
    assert "at most 500 bytes" in flash(c, too_long)
    # Resumed five minutes later (a fake clock): the paused slots are skipped with the note.
    later = zsched.App(client, queue=q, clock=FakeClock(server_ms(client) + 5 * 60_000))
    assert later.resume_schedule("tick")
    ledger = c.get(f"/q/{q}/rule?id=tick", headers=AUTH).text
    assert "skipped: the rule was paused by token (" + esc in ledger


def test_pausing_the_queue_shows_on_every_page_and_resume_ends_it(client, seeded) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    r = post(c, q, "pause-queue", {"note": "db migration " + XSS})
    assert r.headers["location"] == "/"
    assert flash(c, r) == f"paused queue {q}: no run is dispatched until it resumes"
    st = app.status()
    assert st.paused and st.pause_note == "db migration " + XSS
    for path in ("/", f"/q/{q}/runs", f"/q/{q}/rules", f"/q/{q}/rule?id=tick", f"/q/{q}/dead",
                 f"/q/{q}/run?id=send-0001"):  # fmt: skip
        body = c.get(path, headers=AUTH).text
        assert re.search(rf'data-paused-queue="{q}">Queue {q} is paused since \S+Z: db migration '
                         r"&lt;script&gt;", body), path  # fmt: skip
        assert "<script>window.__xss" not in body
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]["partitions"][0]
    assert (
        ov["paused"].startswith("paused since ")
        and 'id="resume-queue"' in c.get("/", headers=AUTH).text
    )
    assert flash(c, post(c, q, "pause-queue", {"note": ""})) == f"queue {q} was already paused"
    assert flash(c, post(c, q, "resume-queue", {})) == f"resumed queue {q}"
    assert not app.status().paused and "data-paused-queue" not in c.get("/", headers=AUTH).text
    assert flash(c, post(c, q, "resume-queue", {})) == f"queue {q} was not paused"


def test_read_only_consoles_have_none_of_the_control_actions(client, seeded) -> None:
    q = seeded.queue
    for env, kw in (({}, {}), (CREDS, {"read_only": True})):
        c = TestClient(
            create_app(zsched.App(client, queue=q, metrics=Metrics()), environ=env, **kw)
        )
        for name in ("reschedule", "run-now", "pause-queue", "resume-queue"):
            r = c.post(f"/q/{q}/act/{name}", data={"run_id": "send-0001", "schedule_id": "tick"},
                       headers=AUTH)  # fmt: skip
            assert r.status_code == 404, name
        for path in ("/", f"/q/{q}/run?id=send-0001", f"/q/{q}/rule?id=tick"):
            assert "/act/" not in c.get(path, headers=AUTH).text
    c = console(client, q)
    r = c.post(f"/q/{q}/act/pause-queue", data={"note": "x"}, headers=AUTH)  # no CSRF token
    assert r.status_code == 403 and not zsched.App(client, queue=q).status().paused


def test_the_run_page_shows_kept_outcomes_and_a_wait_for_a_limit(client, redis_url, queue) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())

    @app.task(name="add", keep_result=True)
    def add(payload: Any) -> Any:
        return {"sum": sum(payload["n"]), "html": XSS}

    @app.task(name="plain")
    def plain(payload: Any) -> None:
        pass

    app.enqueue("add", {"n": [1, 2, 3]}, run_id="kept")
    app.enqueue("plain", None, run_id="not-kept")

    async def work() -> None:
        ac = aioredis.Redis.from_url(redis_url, protocol=2)
        d, w = app.dispatcher(redis=ac), app.worker(redis=ac)
        await d.tick()
        await w.tick()
        await w.close()
        await d.close()

    asyncio.run(work())
    c = console(client, queue)
    page = c.get(f"/q/{queue}/run?id=kept", headers=AUTH).text
    st = app.get_run("kept")
    assert (st.state, st.attempts, st.result["sum"]) == ("done", 1, 6)
    assert re.search(r'id="finished-at"><time datetime="[^"]+"', page)
    assert 'id="attempts">1<' in page and re.search(r'id="duration">\d+ ms<', page)
    assert "&#34;sum&#34;: 6" in page and "&lt;script&gt;window.__xss" in page
    assert "<script>window.__xss" not in page
    plain_page = c.get(f"/q/{queue}/run?id=not-kept", headers=AUTH).text
    assert 'id="no-result"' in plain_page and 'id="finished-at"' in plain_page
    # A run its task's limit deferred (acquire.lua denied it: the slot is held by another).
    app.enqueue("limited", None, run_id="deferred", delay=60)
    one = L.Limits(max_concurrency=1)
    held = L.acquire(app.keys, "limited", None, "1-1", "other", one, hold_ms=60_000, now_ms=None)
    assert app.scripts.run(held).granted
    denied = L.acquire(app.keys, "limited", None, "1-2", "deferred", one, hold_ms=60_000,
                       now_ms=None)  # fmt: skip
    assert not app.scripts.run(denied).granted
    assert app.get_run("deferred").waiting_for_limit == "limited"
    page = c.get(f"/q/{queue}/run?id=deferred", headers=AUTH).text
    assert 'id="waiting">waiting for the limit of task limited' in page


def test_the_overview_lists_dispatchers_with_their_heartbeat_age(client, redis_url, queue):
    app = zsched.App(client, queue=queue, metrics=Metrics())

    async def tick_and_keep() -> str:
        ac = aioredis.Redis.from_url(redis_url, protocol=2)
        d = app.dispatcher(redis=ac)
        await d.tick()
        name = d.heartbeat.name
        await ac.aclose()  # not closed as a dispatcher: its beat stays
        return name

    name = asyncio.run(tick_and_keep())
    c = console(client, queue)
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]["partitions"][0]
    assert [d["name"] for d in ov["dispatchers"]] == [name] and ov["dispatchers"][0]["age_ms"] >= 0
    assert f"{name}: heartbeat " in c.get("/", headers=AUTH).text
    client.zadd(app.keys.dispatchers, {name: int(client.time()[0]) * 1000 - 120_000})
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]
    assert f"dispatcher {name} has not beaten for" in ov["verdict"]


def test_who_paused_a_rule_is_the_login_and_is_shown_as_text(client, seeded) -> None:
    """A bearer token pauses as "token"; a basic-auth user and a login form's session pause
    as that user. A hostile user name renders as text in the list, the rule page and the
    ledger's why."""
    q, app = seeded.queue, zsched.App(client, queue=seeded.queue)
    c = console(client, q)
    assert (
        flash(c, post(c, q, "pause", {"schedule_id": "tick", "note": "n1"})) == "paused rule tick"
    )
    by = {i.schedule_id: i.paused_by for i in app.schedules()}
    assert by["tick"] == "token"
    evil = "ops-" + XSS
    basic = console(client, q, env={"ZSCHED_WEB_USER": evil, "ZSCHED_WEB_PASSWORD": "pw"})
    page = basic.get(f"/q/{q}/rule?id=nightly", auth=(evil, "pw")).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = basic.post(f"/q/{q}/act/pause", auth=(evil, "pw"), follow_redirects=False,
                   data={"csrf": csrf, "schedule_id": "nightly", "note": "n2"})  # fmt: skip
    assert r.status_code == 303
    assert {i.schedule_id: i.paused_by for i in app.schedules()}["nightly"] == evil
    esc = "ops-&lt;script&gt;window.__xss=1&lt;/script&gt;"
    rules = basic.get(f"/q/{q}/rules", auth=(evil, "pw")).text
    assert f'by <span class="paused-by">{esc}' in rules and 'paused-by">token<' in rules
    rule = basic.get(f"/q/{q}/rule?id=nightly", auth=(evil, "pw")).text
    assert f'by <span id="paused-by">{esc}' in rule and "<script>window.__xss" not in rule
    # Resumed five minutes later: tick's paused slots say who paused, as text.
    later = zsched.App(client, queue=q, clock=FakeClock(server_ms(client) + 5 * 60_000))
    assert later.resume_schedule("tick")
    assert (
        "skipped: the rule was paused by token (n1)"
        in c.get(f"/q/{q}/rule?id=tick", headers=AUTH).text
    )
    # A login form's session pauses as the user who logged in.
    form = TestClient(create_app(app, environ={"ZSCHED_WEB_USER": evil,
                                               "ZSCHED_WEB_PASSWORD": "pw"}))  # fmt: skip
    assert form.get("/", auth=(evil, "pw")).status_code == 200
    csrf = form.cookies["zsched_csrf"]
    r = form.post("/login", data={"csrf": csrf, "user": evil, "password": "pw", "next": "/"},
                  follow_redirects=False)  # fmt: skip
    assert r.status_code == 303
    r = form.post(f"/q/{q}/act/pause", data={"csrf": csrf, "schedule_id": "tick"},
                  follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and "error" not in r.headers["location"]
    assert {i.schedule_id: i.paused_by for i in app.schedules()}["tick"] == evil


def test_the_overview_shows_the_entry_shape_and_workers_that_read_plain_entries_only(
    client, queue
) -> None:
    """A consumer that did not register in `readers` (a zsched 0.3 worker) blocks the switch
    to tagged entries (docs/operations.md): the overview names it, escaped."""
    app = zsched.App(client, queue=queue, metrics=Metrics())
    k = app.keys
    client.xgroup_create(k.ready, "workers", id="0", mkstream=True)
    client.xgroup_createconsumer(k.ready, "workers", "new-1")
    client.hset(k.readers, "new-1", "plain,tagged")
    old = "old-" + XSS
    client.xgroup_createconsumer(k.ready, "workers", old)
    c = console(client, queue)
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]["partitions"][0]
    assert ov["entries"] == "plain"
    assert {x["name"]: x["reads"] for x in ov["consumers"]} == {"new-1": "plain,tagged", old: None}
    page = c.get("/", headers=AUTH).text
    assert '<b data-k="entries">plain</b>' in page
    assert "new-1: 0 running, last read" in page
    lines = [ln for ln in page.split("<li>") if "did not register" in ln]
    assert len(lines) == 1 and XSS not in lines[0] and "old-" in lines[0]
    client.hset(k.control, "entries", "tagged")
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]["partitions"][0]
    assert ov["entries"] == "tagged"
