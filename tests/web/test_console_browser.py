"""The console in a real browser: Debian's chromium driven by Playwright (no browser download),
against uvicorn serving the console over the suite's real redis-server. Every page is opened,
every action performed, and the resulting state read back through the public API."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from console_seed import TOKEN, XSS, XSS_REASON, XSS_RULE, XSS_RUN, Seeded, seed, server_ms

import zsched
from zsched.observability.metrics import Metrics
from zsched.web import create_app

CHROMIUM = Path("/usr/bin/chromium")
#: `ZSCHED_WEB_SCREENSHOTS=1 make test` refreshes docs/console-*.png from this run; otherwise
#: the screenshots go to a temporary folder (so a test run leaves the work tree as it was).
DOCS = Path(__file__).resolve().parents[2] / "docs"


@contextlib.contextmanager
def serve(asgi: Any) -> Iterator[str]:
    """uvicorn on a free port in a thread; yields the base URL."""
    server = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()
    while not server.started and thread.is_alive():
        started.wait(0.02)  # uvicorn offers no start event to wait on
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def in_thread(coro_fn: Any) -> Any:
    """Run a coroutine on its own loop in a thread: sync Playwright keeps a loop running on
    this one while a browser is open."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(coro_fn())))
    t.start()
    t.join(120)
    return out[0]


@pytest.fixture
def seeded_sync(client: Any, redis_url: str, queue: str) -> Seeded:
    import redis.asyncio as aioredis

    async def go() -> Seeded:
        ac = aioredis.Redis.from_url(redis_url, protocol=2)
        try:
            return await seed(client, ac, queue)
        finally:
            await ac.aclose()

    return in_thread(go)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, never a downloaded one; missing, it fails (make test installs it)."""
    if not CHROMIUM.exists():
        pytest.fail("the browser tests need /usr/bin/chromium: `make chromium` (mk/web.mk)")
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser: Any, **ctx: Any) -> Any:
    context = browser.new_context(timezone_id="America/New_York", locale="en-US", **ctx)
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    return page


def no_injection(page: Any) -> None:
    assert page.evaluate("window.__xss") is None, "an injected script ran"
    assert page.errors == []


def flash(page: Any) -> str:
    return str(page.inner_text("#flash"))


def console(client: Any, queue: str, env: dict[str, str]) -> Any:
    return create_app(zsched.App(client, queue=queue, metrics=Metrics()), environ=env)


def test_every_page_and_every_action_in_a_browser(
    browser, client, redis_url, seeded_sync: Seeded, tmp_path: Path
) -> None:
    q, seeded = seeded_sync.queue, seeded_sync
    app = zsched.App(client, queue=q)
    shots = DOCS if os.environ.get("ZSCHED_WEB_SCREENSHOTS") else tmp_path
    with serve(console(client, q, {"ZSCHED_WEB_TOKEN": TOKEN})) as base:
        page = open_page(browser)
        page.goto(f"{base}/q/{q}/runs")
        assert "/login" in page.url
        page.fill("input[name=token]", TOKEN)
        page.click("#login")
        assert page.url.endswith(f"/q/{q}/runs")
        # Runs: due order, pages, lookup, times in two zones, cancel.
        assert page.locator("#delayed tbody tr").count() == 100
        first = page.locator("#delayed tbody tr").first.inner_text()
        assert XSS_RUN in first and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ / .*EST", first)
        no_injection(page)
        page.click("#next")
        assert page.locator("#delayed tbody tr").first.inner_text().count("send-0099") == 1
        page.fill("input[name=id]", XSS_RUN)
        page.click("#find")
        assert page.inner_text("#run-id") == XSS_RUN and page.inner_text("#state") == "scheduled"
        assert "window.__xss=1" in page.inner_text("#payload")
        assert "EST" in page.inner_text("#scheduled-for")
        no_injection(page)
        page.click("#cancel")
        assert flash(page).startswith(f"cancelled run {XSS_RUN}: it was waiting for its time")
        assert app.get_run(XSS_RUN).state == "cancelled"
        assert page.inner_text("#state") == "cancelled" and "cancelled at" in page.inner_text(
            "#cancelled"
        )
        # Reschedule a delayed run: to a time, then by a delay.
        page.goto(f"{base}/q/{q}/run?id=send-0005")
        page.fill("#reschedule-form input[name=at]", "2030-01-02T03:04")
        page.click("#reschedule")
        assert flash(page) == "run send-0005 now waits until 2030-01-02T03:04:00Z"
        assert app.get_run("send-0005").run_at == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
        page.fill("#reschedule-form input[name=in]", "3600")
        page.click("#reschedule")
        assert flash(page).startswith("run send-0005 now waits until ")
        assert app.get_run("send-0005").run_at < datetime(2030, 1, 1, tzinfo=UTC)  # type: ignore[operator]
        page.click("#run-due-now")  # run now: due at once (a reschedule with no delay)
        assert flash(page).startswith("run send-0005 now waits until ")
        due = app.get_run("send-0005").run_at
        assert due is not None and due.timestamp() * 1000 <= server_ms(client)
        # Overview: a dispatcher's heartbeat; pause the queue with a note, seen on every page.
        beat = in_thread(lambda: one_tick_kept(app, redis_url))
        page.goto(f"{base}/")
        assert page.inner_text(".verdict")
        # One cancelled, one run now (dispatched by that tick): two fewer delayed runs.
        assert page.locator("[data-k=delayed]").first.inner_text() == str(len(seeded.delayed) - 2)
        assert f"{beat}: heartbeat " in page.inner_text("[data-k=dispatchers]")
        page.locator("#updated", has_text="updated").wait_for()  # one live refresh: rates
        page.screenshot(path=str(shots / "console-overview.png"), full_page=True)
        no_injection(page)
        page.fill("#pause-queue-form input[name=note]", "deploy " + XSS)
        page.click("#pause-queue")
        assert flash(page) == f"paused queue {q}: no run is dispatched until it resumes"
        assert app.status().paused and app.status().pause_note == "deploy " + XSS
        assert page.inner_text("[data-k=paused]").startswith("Paused: paused since ")
        page.goto(f"{base}/q/{q}/dead")
        banner = page.inner_text(f"[data-paused-queue='{q}']")
        assert banner.startswith(f"Queue {q} is paused since ") and ("deploy " + XSS) in banner
        no_injection(page)
        page.goto(f"{base}/")
        page.click("#resume-queue")
        assert flash(page) == f"resumed queue {q}" and not app.status().paused
        assert page.locator("[data-paused-queue]").count() == 0
        # Rules: list, a rule's ledger, pause, resume, edit, bad edit, backfill, simulate.
        page.goto(f"{base}/q/{q}/rules")
        assert page.locator("#rules tbody tr").count() == 3
        assert "+0100 Europe/Berlin" in page.inner_text("tr[data-rule=nightly]")
        assert XSS_RULE in page.inner_text("#rules")
        no_injection(page)
        page.click("text=tick")
        assert page.inner_text("#audit") == "every slot past its grace has an outcome"
        ledger = page.inner_text("#ledger")
        assert "skipped: the previous run tick@" in ledger and "coalesced" in ledger
        page.fill("#pause-form input[name=note]", "ana: " + XSS)
        page.click("#pause")
        assert flash(page) == "paused rule tick" and rule_of(app, "tick").paused
        assert rule_of(app, "tick").pause_note == "ana: " + XSS
        assert rule_of(app, "tick").paused_by == "token"  # who: the token login
        assert ("ana: " + XSS) in page.inner_text("#pause-note")
        assert page.inner_text("#paused-by") == "token"
        page.goto(f"{base}/q/{q}/rules")
        assert ("paused since" in page.inner_text("tr[data-rule=tick]")
                and ("ana: " + XSS) in page.inner_text("tr[data-rule=tick]"))  # fmt: skip
        no_injection(page)
        page.goto(f"{base}/q/{q}/rule?id=tick")
        page.click("#resume")
        assert flash(page) == "resumed rule tick" and not rule_of(app, "tick").paused
        page.fill("#edit-form input[name=every]", "-5")
        page.select_option("#edit-form select[name=kind]", "every")
        page.click("#save")
        assert (
            "interval must be at least 1 ms" in flash(page)
            and rule_of(app, "tick").rule == "every 1m"
        )
        page.fill("#edit-form input[name=every]", "120")
        page.select_option("#edit-form select[name=overlap]", "queue")
        page.click("#save")
        assert flash(page) == "saved rule tick"
        assert (rule_of(app, "tick").rule, rule_of(app, "tick").overlap) == ("every 2m", "queue")
        page.fill("input[name=start]", "2026-11-01T00:00")
        page.fill("input[name=end]", "2026-11-01T00:05")
        page.click("#backfill")
        assert flash(page) == "backfill of tick: 3 run(s) enqueued"
        assert app.get_run("tick@2026-11-01T00:02:00Z").state in ("scheduled", "ready")
        page.fill("#simulate-form input[name=from]", "2026-12-01T00:00")
        page.fill("#simulate-form input[name=to]", "2026-12-01T00:09")
        page.click("#simulate")
        assert page.locator("#sim tbody tr").count() >= 5 and "coalesced" in page.inner_text("#sim")
        page.screenshot(path=str(shots / "console-rule.png"), full_page=True)
        assert (shots / "console-rule.png").stat().st_size > 10_000
        # Run a rule now: started, then skipped by its overlap lease, then forced.
        app.schedule("solo", "report", every=3600, overlap="skip")
        page.goto(f"{base}/q/{q}/rule?id=solo")
        page.click("#run-now")
        started = flash(page)
        assert started.startswith("rule solo fired now as solo@manual:")
        assert app.get_run(started.rsplit(" ", 1)[1]).state == "scheduled"
        page.click("#run-now")
        assert flash(page).startswith("rule solo was not fired: its previous run still holds")
        page.check("#force")
        page.click("#run-now")
        assert flash(page).startswith("rule solo fired now as solo@manual:")
        assert [h["outcome"] for h in app.schedule_history("solo")].count("manual") == 2
        assert "run now by hand as solo@manual:" in page.inner_text("#ledger")
        # Remove, with a confirmation that names the rule.
        page.goto(f"{base}/q/{q}/rule?id=nightly")
        page.click("#remove")
        assert page.inner_text("#rule-id") == "nightly"
        page.click("#confirm-remove")
        assert flash(page) == "removed rule nightly"
        assert "nightly" not in [i.schedule_id for i in app.schedules()]
        # Dead letters: replay one, purge a selection, replay all matching a filter.
        page.goto(f"{base}/q/{q}/dead")
        assert (
            XSS_REASON in page.inner_text("#dead") and page.locator("#dead tbody tr").count() == 3
        )
        no_injection(page)
        row = page.locator("tr", has_text="boom-0")
        row.locator("button", has_text="replay").click()
        assert flash(page).startswith("replayed: replayed 1")
        assert app.get_run("boom-0").state == "scheduled" or app.get_run("boom-0").state == "ready"
        page.locator("tr", has_text="boom-2").locator("input[name=entry_id]").check()
        page.click("#purge-selected")
        assert flash(page) == "purged 1 dead letter(s)"
        assert [d.run_id for d in app.dead_letters()] == ["boom-1"]
        page.fill("input[name=reason]", "bad input")
        page.click("#filter")
        page.click("#replay-matching")
        assert "replay 1 dead letter(s)" in page.inner_text("#confirm-count")
        page.click("#confirm")
        assert flash(page).startswith("replayed: replayed 1") and app.dead_letters() == []
        no_injection(page)


async def one_tick_kept(app: zsched.App, redis_url: str) -> str:
    """One dispatcher pass whose heartbeat stays (the dispatcher is not closed)."""
    import redis.asyncio as aioredis

    ac = aioredis.Redis.from_url(redis_url, protocol=2)
    d = app.dispatcher(redis=ac)
    await d.tick()
    await ac.aclose()
    return d.heartbeat.name


def rule_of(app: zsched.App, sid: str) -> Any:
    return next(i for i in app.schedules() if i.schedule_id == sid)


def test_the_overview_shows_a_newly_dispatched_run_without_a_reload(
    browser, client, redis_url, queue
) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())
    with serve(console(client, queue, {"ZSCHED_WEB_TOKEN": TOKEN})) as base:
        page = open_page(browser, extra_http_headers={"Authorization": f"Bearer {TOKEN}"})
        page.goto(f"{base}/")
        page.evaluate("window.__marker = 'same page'")
        app.enqueue("email", {"to": "x"}, run_id="fresh-run")

        async def dispatch() -> None:
            import redis.asyncio as aioredis

            ac = aioredis.Redis.from_url(redis_url, protocol=2)
            d = app.dispatcher(redis=ac)
            await d.tick()
            await d.close()
            await ac.aclose()

        in_thread(dispatch)
        # The page polls /api/overview; the new run shows up in the list without a reload.
        page.locator("[data-k=newest_ready] a", has_text="fresh-run").wait_for(timeout=30_000)
        assert page.evaluate("window.__marker") == "same page"
        assert page.locator("[data-k=ready]").first.inner_text() == "1"
        no_injection(page)


def test_read_only_and_missing_credentials_refuse_actions_in_a_browser(
    browser, client, seeded_sync
) -> None:
    q = seeded_sync.queue
    app = zsched.App(client, queue=q)
    with serve(console(client, q, {})) as base:
        page = open_page(browser)
        for path in ("/", f"/q/{q}/runs", f"/q/{q}/rule?id=tick", f"/q/{q}/dead"):
            page.goto(base + path)
            assert "no credentials are configured" in page.inner_text("#read-only")
            assert page.locator("form[action*='/act/']").count() == 0
            no_injection(page)
        status = page.evaluate(f"""fetch('{base}/q/{q}/act/cancel', {{method: 'POST',
            body: new URLSearchParams({{run_id: 'send-0001'}})}}).then(r => r.status)""")
        assert status == 404
    with serve(console(client, q, {"ZSCHED_WEB_TOKEN": TOKEN})) as base:
        page = open_page(browser)
        page.goto(f"{base}/q/{q}/dead")
        assert "/login" in page.url
        resp = page.request.post(f"{base}/q/{q}/act/cancel", form={"run_id": "send-0001"})
        assert resp.status == 401
    assert app.get_run("send-0001").state == "scheduled"
