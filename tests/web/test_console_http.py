"""The console over HTTP (Starlette's TestClient) against the suite's real redis-server:
pages, mounting, auth, read-only mode, CSRF, escaping, bounded reads, actions."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from console_seed import CREDS, TOKEN, XSS, XSS_REASON, XSS_RULE, XSS_RUN, Seeded, server_ms
from redis_server import RedisServer
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import zsched
from zsched.observability.metrics import Metrics
from zsched.web import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def console(client: Any, queue: str, env: dict[str, str] | None = None, **kw: Any) -> TestClient:
    app = zsched.App(client, queue=queue, metrics=Metrics(), partitions="auto")
    return TestClient(create_app(app, environ=CREDS if env is None else env, **kw))


def pages(q: str) -> list[str]:
    return ["/", "/api/overview", f"/q/{q}/runs", f"/q/{q}/run?id=send-0001", f"/q/{q}/rules",
            f"/q/{q}/rule?id=tick", f"/q/{q}/dead", f"/q/{q}/rule/remove?id=tick",
            f"/q/{q}/dead/confirm?op=purge"]  # fmt: skip


def csrf_of(c: TestClient, path: str) -> str:
    body = c.get(path, headers=AUTH).text
    return re.search(r'name="csrf" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]


def post(c: TestClient, q: str, action: str, data: dict[str, Any], page: str = "/") -> Any:
    data = {"csrf": csrf_of(c, page), **data}
    return c.post(f"/q/{q}/act/{action}", data=data, headers=AUTH, follow_redirects=False)


def flash(c: TestClient, resp: Any) -> str:
    body = c.get(resp.headers["location"], headers=AUTH).text
    return re.search(r'id="flash">([^<]*)<', body).group(1)  # type: ignore[union-attr]


def test_every_page_shows_the_seeded_queue(client, seeded: Seeded) -> None:
    q = seeded.queue
    c = console(client, q)
    for path in pages(q):
        r = c.get(path, headers=AUTH)
        assert r.status_code == 200, (path, r.text[:500])
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]
    assert ov["total"]["delayed"] == len(seeded.delayed) and ov["total"]["dead"] == 3
    assert ov["total"]["rules"] == 3 and "rates" in ov["partitions"][0]
    run = c.get(f"/q/{q}/run?id=send-0001", headers=AUTH).text
    assert "scheduled" in run and "&#34;i&#34;: 1" in run and 'id="cancel"' in run
    rule = c.get(f"/q/{q}/rule?id=tick", headers=AUTH).text
    assert "skipped: the previous run tick@" in rule and "still running (overlap=skip)" in rule
    assert "coalesced" in rule
    rules = c.get(f"/q/{q}/rules", headers=AUTH).text
    assert "cron &#39;30 2 * * *&#39; in Europe/Berlin" in rules and "+0100 Europe/Berlin" in rules
    dead = c.get(f"/q/{q}/dead", headers=AUTH).text
    assert "bad input 0" in dead and dead.count('name="entry_id"') == 3


def test_a_run_page_shows_state_times_and_a_capped_payload(client, queue) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())
    app.enqueue("big", {"blob": "x" * 100_000}, delay=3600, run_id="big-one")
    body = console(client, queue).get(f"/q/{queue}/run?id=big-one", headers=AUTH).text
    assert "cut: 100,0" in body and body.count("x" * 1000) <= 17
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+" data-local>', body)
    missing = console(client, queue).get(f"/q/{queue}/run?id=nope", headers=AUTH)
    assert missing.status_code == 404 and "nope" in missing.text


def test_delayed_runs_page_by_cursor_in_due_order_and_filter_by_task(client, seeded) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    seen: list[str] = []
    url = f"/q/{q}/runs"
    while url:
        body = c.get(url, headers=AUTH).text
        ids = re.findall(r'run\?id=([^"]+)">', body)
        assert len(ids) <= 100
        seen += ids
        nxt = re.search(r'id="next" href="([^"]+)"', body)
        url = nxt.group(1).replace("&amp;", "&") if nxt else ""
    assert len(seen) == len(seeded.delayed) and len(set(seen)) == len(seen)
    assert seen[0].startswith("run-") and seen[1:] == [f"send-{i:04d}" for i in range(150)]
    zsched.App(client, queue=q, metrics=Metrics()).enqueue("other", None, delay=7200, run_id="o1")
    only = c.get(f"/q/{q}/runs?task=other", headers=AUTH).text
    assert re.findall(r'run\?id=([^"]+)">', only) == ["o1"]


def test_it_mounts_under_a_prefix(client, seeded) -> None:
    q = seeded.queue
    inner = create_app(zsched.App(client, queue=q, metrics=Metrics()), environ=CREDS)
    c = TestClient(Starlette(routes=[Mount("/ops", app=inner)]))
    body = c.get("/ops/", headers=AUTH).text
    links = re.findall(r'(?:href|action|src)="([^"]+)"', body)
    assert links and all(u.startswith("/ops/") for u in links), links
    assert c.get("/ops/static/console.js").status_code == 200
    token = re.search(r'name="csrf" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    r = c.post(f"/ops/q/{q}/act/cancel", data={"csrf": token, "run_id": "send-0000"},
               headers=AUTH, follow_redirects=False)  # fmt: skip
    assert r.status_code == 303 and r.headers["location"].startswith("/ops/q/")
    assert zsched.App(client, queue=q).get_run("send-0000").state == "cancelled"


def test_without_credentials_it_is_read_only_on_every_page_and_has_no_action_endpoint(
    client, seeded
) -> None:
    q = seeded.queue
    c = console(client, q, env={})
    for path in pages(q)[:1] + pages(q)[2:]:
        body = c.get(path).text
        assert "Read-only: no credentials are configured" in body, path
        assert "/act/" not in body, path
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("/").text)
    for action in ("cancel", "pause", "remove", "replay", "purge-matching"):
        r = c.post(
            f"/q/{q}/act/{action}", data={"csrf": token and token.group(1), "run_id": "send-0001"}
        )
        assert r.status_code == 404
    assert zsched.App(client, queue=q).get_run("send-0001").state == "scheduled"


def test_read_only_flag_removes_action_endpoints_even_with_credentials(client, seeded) -> None:
    q = seeded.queue
    c = console(client, q, read_only=True)
    body = c.get(f"/q/{q}/rule?id=tick", headers=AUTH).text
    assert "Read-only: the console was started read-only" in body and "/act/" not in body
    r = c.post(f"/q/{q}/act/pause", data={"schedule_id": "tick", "csrf": csrf_of(c, "/")},
               headers=AUTH)  # fmt: skip
    assert r.status_code == 404
    assert not zsched.App(client, queue=q).schedules()[1].paused


def test_actions_and_pages_need_credentials(client, seeded) -> None:
    q = seeded.queue
    c = console(client, q)
    assert c.get("/", follow_redirects=False).status_code == 401  # basic auth is configured
    assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/", auth=("ops", "pw")).status_code == 200
    assert c.get("/", auth=("ops", "nope")).status_code == 401
    token_only = console(client, q, env={"ZSCHED_WEB_TOKEN": TOKEN})
    r = token_only.get(f"/q/{q}/dead", follow_redirects=False)
    assert r.status_code == 303 and "/login?next=" in r.headers["location"]
    anon = TestClient(token_only.app)
    page = anon.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    r = anon.post(f"/q/{q}/act/cancel", data={"csrf": csrf, "run_id": "send-0001"})
    assert r.status_code == 401
    bad = anon.post("/login", data={"csrf": csrf, "token": "wrong", "next": "/"})
    assert bad.status_code == 401
    evil = anon.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "//evil.example/"},
                     follow_redirects=False)  # fmt: skip
    assert evil.status_code == 303 and evil.headers["location"] == "/"
    assert anon.get(f"/q/{q}/dead").status_code == 200  # the session cookie works now
    assert zsched.App(client, queue=q).get_run("send-0001").state == "scheduled"


def test_actions_need_the_csrf_token_and_our_origin(client, seeded) -> None:
    q = seeded.queue
    c = console(client, q)
    good = csrf_of(c, "/")
    for data, headers in [({}, AUTH), ({"csrf": "forged"}, AUTH),
                          ({"csrf": good}, {**AUTH, "Origin": "https://evil.example"})]:  # fmt: skip
        r = c.post(f"/q/{q}/act/cancel", data={"run_id": "send-0001", **data}, headers=headers)
        assert r.status_code == 403
    assert zsched.App(client, queue=q).get_run("send-0001").state == "scheduled"


def test_no_get_request_changes_state(client, seeded) -> None:
    q = seeded.queue
    app = zsched.App(client, queue=q)
    before = (app.status().delayed, app.status().dead, [i.as_dict() for i in app.schedules()])
    c = console(client, q)
    for action in ("cancel", "pause", "remove", "replay", "purge", "purge-matching", "edit"):
        assert c.get(f"/q/{q}/act/{action}?run_id=send-0001&schedule_id=tick",
                     headers=AUTH).status_code == 405  # fmt: skip
    for path in pages(q):
        c.get(path, headers=AUTH)
    c.get(f"/q/{q}/rule?id=tick&from=2026-12-01T00:00&to=2026-12-01T03:00", headers=AUTH)
    after = (app.status().delayed, app.status().dead, [i.as_dict() for i in app.schedules()])
    assert after == before


def test_hostile_strings_are_escaped_everywhere(client, seeded) -> None:
    q = seeded.queue
    c = console(client, q)
    app = zsched.App(client, queue=q)
    dead = app.dead_letters()
    urls = [*pages(q), f"/q/{q}/run?id={XSS_RUN}", f"/q/{q}/rule?id={XSS_RULE}",
            f"/q/{q}/run?id={dead[2].run_id}", f"/q/{q}/dead?reason=reason-",
            f"/q/{q}/runs?task={XSS}", f"/q/{q}/rule/remove?id={XSS_RULE}"]  # fmt: skip
    app.pause_schedule("nightly", note="note-" + XSS, by="by-" + XSS)  # a rule's note, who
    app.pause_schedule(XSS_RULE, by="by-" + XSS)  # ... and the queue's note
    app.pause_queue("queue-note-" + XSS)
    for url in urls:
        r = c.get(url, headers=AUTH, params=None)
        if url.endswith("/api/overview"):  # JSON, with <, > and & escaped; written as text
            assert r.headers["content-type"] == "application/json"
            assert "<" not in r.text and ">" not in r.text and "&" not in r.text, url
            continue
        assert "<script>window.__xss" not in r.text and "<img src=x" not in r.text, url
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in c.get(
        f"/q/{q}/run", params={"id": XSS_RUN}, headers=AUTH).text  # fmt: skip
    assert "reason-&lt;script&gt;" in c.get(f"/q/{q}/dead", headers=AUTH).text
    assert "note-&lt;script&gt;" in c.get(f"/q/{q}/rules", headers=AUTH).text
    assert "note-&lt;script&gt;" in c.get(f"/q/{q}/rule?id=nightly", headers=AUTH).text
    assert "by-&lt;script&gt;" in c.get(f"/q/{q}/rules", headers=AUTH).text
    assert "by-&lt;script&gt;" in c.get(f"/q/{q}/rule?id=nightly", headers=AUTH).text
    later = zsched.App(client, queue=q, clock=zsched.FakeClock(server_ms(client) + 7_200_000))
    assert later.resume_schedule(XSS_RULE)  # two hours: its paused slots name who paused
    ledger = c.get(f"/q/{q}/rule", params={"id": XSS_RULE}, headers=AUTH).text
    assert "skipped: the rule was paused by by-&lt;script&gt;" in ledger
    assert "<script>window.__xss" not in ledger and "<img src=x" not in ledger
    assert "queue-note-&lt;script&gt;" in c.get(f"/q/{q}/dead", headers=AUTH).text
    assert "rule-&lt;script&gt;" in c.get(f"/q/{q}/rules", headers=AUTH).text
    assert "script-src &#39;self&#39;" not in c.get("/", headers=AUTH).text
    assert "script-src 'self'" in c.get("/", headers=AUTH).headers["content-security-policy"]
    assert "failed: " + XSS_REASON in [d.reason for d in dead]


class Monitor:
    """Every command Redis receives while the block runs (MONITOR on its own connection)."""

    def __init__(self, client: Any) -> None:
        self.client, self.commands = client, []  # type: ignore[var-annotated]

    def __enter__(self) -> Monitor:
        self.mon = self.client.monitor()
        self.conn = self.mon.__enter__()
        self.stop = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self) -> None:
        for cmd in self.conn.listen():
            self.commands.append(cmd["command"])
            if "zsched-monitor-end" in cmd["command"]:
                return

    def __exit__(self, *exc: Any) -> None:
        self.client.echo("zsched-monitor-end")
        self.thread.join(10)
        self.mon.__exit__(*exc)


def test_every_redis_read_of_a_page_is_bounded(client, seeded) -> None:
    q = seeded.queue
    c = console(client, q)
    with Monitor(client) as mon:
        for path in pages(q):
            c.get(path, headers=AUTH)
    cmds = [x.split(" ")[0].upper() for x in mon.commands]
    assert "HSCAN" in cmds and not {"KEYS", "SCAN"} & set(cmds)
    for line in mon.commands:
        name, *args = line.split(" ")
        if name.upper() in ("XRANGE", "XREVRANGE"):
            assert "COUNT" in line.upper(), line
        if name.upper() == "HGETALL":
            assert args[0].endswith(":stats"), line  # the counters only, never rules or runs
        if name.upper() == "ZRANGE" and args[1:3] == ["0", "-1"]:
            assert ":leaf:" in args[0], line  # a leaf holds at most 64 runs


class PasswordServer(RedisServer):
    """A redis-server that needs a password (its readiness check sends it)."""

    def client_kwargs(self) -> dict[str, object]:
        return {"password": "hunter2"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 30.0) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # polling a starting process for its port


def test_zsched_web_serves_standalone_and_never_shows_redis_credentials(queue) -> None:
    with PasswordServer("--requirepass", "hunter2") as srv:
        url = f"redis://:hunter2@127.0.0.1:{srv.port}/0"
        zsched.App(url, queue=queue).enqueue("t", None, delay=600, run_id="x1")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZSCHED_WEB_")}
        proc = subprocess.Popen([sys.executable, "-m", "zsched", "web", "--redis", url,
                                 "--queue", queue, "--port", str(port), "--read-only"],
                                stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        try:
            status, body = get(f"http://127.0.0.1:{port}/")
            assert status == 200 and "Read-only" in body and "redis://***@127.0.0.1" in body
            assert "hunter2" not in body
            status, body = get(f"http://127.0.0.1:{port}/q/{queue}/run?id=x1")
            assert status == 200 and "scheduled" in body
            req = urllib.request.Request(f"http://127.0.0.1:{port}/q/{queue}/act/cancel",
                                         data=b"run_id=x1", method="POST")  # fmt: skip
            assert get_req(req) == 404
            srv.stop()
            status, body = get(f"http://127.0.0.1:{port}/")
            assert status == 503 and "cannot reach Redis" in body and "hunter2" not in body
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=30)
        assert "redis://***@" in err and "hunter2" not in err
    wrong = subprocess.run([sys.executable, "-m", "zsched", "web", "--redis",
                            "redis://:s3cr3t-pw@127.0.0.1:1/0"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert wrong.returncode == 1 and "s3cr3t-pw" not in wrong.stderr


def get_req(req: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_verdict_names_its_causes(client, queue) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())
    c = console(client, queue)
    assert c.get("/api/overview", headers=AUTH).json()["queues"][0]["verdict"] == "healthy"
    app.enqueue("late", None, run_at=(client.time()[0] - 120), run_id="late-1")
    v = c.get("/api/overview", headers=AUTH).json()["queues"][0]["verdict"]
    assert v.startswith("needs attention: due runs wait for a dispatcher: the oldest was due")
    # A rule made 10 minutes ago that no dispatcher ever fired: the audit and the late fire.
    now = server_ms(client)
    old = zsched.App(client, queue=queue, clock=zsched.FakeClock(now - 600_000), metrics=Metrics())
    old.schedule("lost", "t", every=60)
    v = c.get("/api/overview", headers=AUTH).json()["queues"][0]["verdict"]
    assert re.search(
        r"rule lost has (9|10) slot\(s\) past their grace with no outcome \(audit\)", v
    )
    assert re.search(r"rule lost is late: its fire was due (9|10)min ago", v)
    assert "needs attention" in c.get("/", headers=AUTH).text
    page = c.get(f"/q/{queue}/rule?id=lost", headers=AUTH).text
    assert re.search(r'id="audit">(9|10) slot\(s\) past their grace have no outcome', page)


def test_a_partitioned_queue_shows_each_partition(client, queue) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics(), partitions=2)
    app.enqueue_many([{"task": "t", "run_id": f"p{i}", "delay": 600} for i in range(20)])
    c = console(client, queue)
    ov = c.get("/api/overview", headers=AUTH).json()["queues"][0]
    assert [p["name"] for p in ov["partitions"]] == [f"{queue}#0", f"{queue}#1"]
    assert ov["total"]["delayed"] == 20
    one = c.get(f"/q/{queue}/runs?p=1", headers=AUTH).text
    two = c.get(f"/q/{queue}/runs?p=0", headers=AUTH).text
    ids = re.findall(r'run\?id=(p\d+)">', one) + re.findall(r'run\?id=(p\d+)">', two)
    assert sorted(ids) == sorted(f"p{i}" for i in range(20))
    assert "scheduled" in c.get(f"/q/{queue}/run?id=p7", headers=AUTH).text


def test_actions_change_redis_through_the_public_api_and_refuse_bad_input(client, seeded) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    spec_before = [i.as_dict() for i in app.schedules()]
    r = post(c, q, "edit", {"schedule_id": "nightly", "kind": "cron", "cron": "61 * * * *",
                            "tz": "Europe/Berlin"})  # fmt: skip
    assert "minute" in flash(c, r).lower() and [i.as_dict() for i in app.schedules()] == spec_before
    r = post(c, q, "edit", {"schedule_id": "nightly", "kind": "cron", "cron": "0 3 * * *",
                            "tz": "Mars/Olympus"})  # fmt: skip
    assert "Mars/Olympus" in flash(c, r)
    r = post(c, q, "edit", {"schedule_id": "nightly", "kind": "cron", "cron": "0 3 * * *",
                            "tz": "America/New_York", "misfire": "skip"})  # fmt: skip
    assert flash(c, r) == "saved rule nightly"
    nightly = next(i for i in app.schedules() if i.schedule_id == "nightly")
    assert nightly.rule == "cron '0 3 * * *' in America/New_York" and nightly.misfire == "skip"
    r = post(c, q, "backfill", {"schedule_id": "nightly", "start": "yesterday", "end": "now"})
    assert "start: expected a date and time" in flash(c, r)
    r = post(c, q, "remove", {"schedule_id": "nightly"})  # no confirmation form
    assert "needs its confirmation" in flash(c, r) and len(app.schedules()) == 3
    confirm = c.get(f"/q/{q}/dead/confirm?op=purge&reason=bad input", headers=AUTH).text
    assert re.search(
        r"purge <b>2</b> dead letter\(s\) whose reason contains <b>bad input</b>", confirm
    )
    r = post(c, q, "purge-matching", {"reason": "bad input"})
    assert flash(c, r) == "purged 2 dead letter(s)"
    assert [d.reason for d in app.dead_letters()] == ["failed: " + XSS_REASON]
    r = post(c, q, "replay", {"entry_id": []})
    assert flash(c, r) == "select at least one dead letter"
    r = post(c, q, "cancel", {"run_id": "send-0003"})
    assert flash(c, r) == "cancelled run send-0003: it was waiting for its time and will not run"
    r = post(c, q, "cancel", {"run_id": "send-0003"})
    assert flash(c, r) == "run send-0003 was cancelled already"
    assert post(c, q, "no-such-action", {}).status_code == 404


def test_rules_page_through_many_rules_and_search_by_id_prefix(client, queue) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())
    for i in range(250):
        app.schedule(f"r{i:03d}", "t", every=60 + i)
    app.schedule("needle*[x]", "t", every=60)
    c = console(client, queue)
    seen: list[str] = []
    url = f"/q/{queue}/rules"
    while url:
        body = c.get(url, headers=AUTH).text
        ids = re.findall(r'<tr data-rule="([^"]+)">', body)
        assert len(ids) <= 130  # one HSCAN step: COUNT 100 is a hint
        seen += ids
        nxt = re.search(r'id="next" href="([^"]+)"', body)
        url = nxt.group(1).replace("&amp;", "&") if nxt else ""
    assert sorted(seen) == sorted([f"r{i:03d}" for i in range(250)] + ["needle*[x]"])
    found = c.get(f"/q/{queue}/rules", params={"match": "needle*["}, headers=AUTH).text
    assert re.findall(r'<tr data-rule="([^"]+)">', found) == ["needle*[x]"]
