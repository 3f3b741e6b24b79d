"""One unreadable rule (a spec this zsched cannot decode, or a corrupt state) does not break
the console: the overview and /api/overview list it under `unreadable`, the rules page shows
it as its own row (escaped id and reason, a remove action only), its page and its remove page
render, removing it works (POST + CSRF), and the other rules render and work as before."""

from __future__ import annotations

import msgpack
from console_seed import XSS, Seeded
from markupsafe import escape
from test_console_http import AUTH, console, flash, pages, post

import zsched
from zsched.web.backend import SyncBackend

BAD = "bad-" + XSS.replace("@", "")  # a hostile rule id; its reason is hostile too
SICK = "sick"  # a readable spec, a corrupt state


def break_rules(client, q: str) -> None:
    app = zsched.App(client, queue=q)
    app.schedule(BAD, "report", every=60)
    app.schedule(SICK, "report", every=60)
    k = app.keys
    d = msgpack.unpackb(client.hget(k.rules, BAD), raw=False)
    d["trigger"]["kind"] = XSS  # the reason names it: "unknown trigger kind '<script>…'"
    client.hset(k.rules, BAD, msgpack.packb(d, use_bin_type=True))
    client.hset(k.rule_state, SICK, b"\xc1 not msgpack")


def hostile(text: str) -> bool:
    return "<script>window.__xss" in text or "<img src=x" in text


def test_unreadable_rules_are_listed_and_the_other_pages_work(client, seeded: Seeded) -> None:
    q = seeded.queue
    break_rules(client, q)
    c = console(client, q)
    for path in pages(q):
        r = c.get(path, headers=AUTH)
        assert r.status_code == 200, (path, r.text[:300])
        assert not hostile(r.text), path
    for sid in (BAD, SICK):
        for path in (f"/q/{q}/rule", f"/q/{q}/rule/remove"):
            r = c.get(path, params={"id": sid}, headers=AUTH)
            assert r.status_code == 200, (path, sid, r.text[:300])
            assert not hostile(r.text), (path, sid)
    raw = c.get("/api/overview", headers=AUTH)
    assert "<" not in raw.text
    ov = raw.json()["queues"][0]
    found = {u["schedule_id"]: u["reason"] for u in ov["unreadable"]}
    assert set(found) == {BAD, SICK}
    assert XSS in found[BAD] and "state" in found[SICK]
    assert f"rule {SICK} cannot be read" in ov["verdict"]
    home = c.get("/", headers=AUTH).text
    assert f"rule {escape(BAD)} cannot be read" in home
    rules = c.get(f"/q/{q}/rules", headers=AUTH).text
    assert "cron &#39;30 2 * * *&#39; in Europe/Berlin" in rules  # the others as before
    row = rules.split(f'data-rule="{escape(BAD)}"', 1)[1].split("</tr>", 1)[0]
    assert "cannot be read" in row and str(escape(XSS)) in row
    assert "rule/remove?id=" in row
    page = c.get(f"/q/{q}/rule", params={"id": SICK}, headers=AUTH).text
    assert 'id="unreadable"' in page and "state" in page
    for control in ('id="pause"', 'id="run-now"', 'id="edit-form"', 'id="backfill"'):
        assert control not in page, control
    assert 'id="remove"' in page
    sync = SyncBackend.build([zsched.App(client, queue=q)])  # the sync path says the same
    assert sync.rule(q, SICK)["unreadable"].startswith(f"schedule {SICK} cannot be read: ")
    assert {r["info"].schedule_id for r in sync.rules(q, 0, 0, "")["rows"]} >= {BAD, SICK}


def test_an_unreadable_rule_is_removed_and_the_others_still_act(client, seeded) -> None:
    q = seeded.queue
    break_rules(client, q)
    c = console(client, q)
    app = zsched.App(client, queue=q)
    r = post(c, q, "remove", {"schedule_id": SICK, "confirm": SICK})
    assert flash(c, r) == f"removed rule {SICK}"
    r = post(c, q, "remove", {"schedule_id": BAD, "confirm": BAD})
    assert r.headers["location"].endswith(f"/q/{q}/rules")
    assert client.hget(app.keys.rules, BAD) is None and client.hget(app.keys.rules, SICK) is None
    assert flash(c, post(c, q, "pause", {"schedule_id": "tick"})) == "paused rule tick"
    assert app.schedules()[0].schedule_id != SICK
    assert "unreadable" in c.get("/api/overview", headers=AUTH).json()["queues"][0]


def test_an_action_that_needs_the_rule_says_it_cannot_be_read(client, seeded) -> None:
    q = seeded.queue
    break_rules(client, q)
    c = console(client, q)
    for action in ("pause", "resume", "run-now"):
        msg = flash(c, post(c, q, action, {"schedule_id": SICK}))
        assert msg.startswith(f"schedule {SICK} cannot be read: "), (action, msg)


def test_a_corrupt_trigger_history_leaves_its_rule_readable_in_the_console(client, seeded: Seeded):
    """Only the old triggers' audit is lost: the pages render, the rule is not listed as one
    that cannot be read, and its page shows it as usual."""
    q = seeded.queue
    app = zsched.App(client, queue=q)
    app.schedule("hist", "report", every=60)
    client.hset(app.keys.rule_triggers, "hist", b"\xc1 not msgpack")
    c = console(client, q)
    for path in pages(q):
        assert c.get(path, headers=AUTH).status_code == 200, path
    r = c.get(f"/q/{q}/rule", params={"id": "hist"}, headers=AUTH)
    assert r.status_code == 200 and "cannot be read" not in r.text
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]
    assert "hist" not in {u["schedule_id"] for u in ov["unreadable"]}
