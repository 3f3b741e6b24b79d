"""The console over zsched.AsyncApp: the pages and actions AsyncApp can serve run on the
event loop, never in the thread pool; the rest (zsched.web.aio_backend.THREAD_PATH) keeps the
sync path; each event loop's asyncio clients are closed when that loop ends."""

from __future__ import annotations

import re
from typing import Any

import pytest
from console_seed import Seeded
from test_console_http import AUTH, console, post

import zsched
from zsched.app import AsyncApp
from zsched.web import backend as backend_module
from zsched.web.aio_backend import THREAD_PATH


@pytest.fixture
def thread_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The backend methods Console.call sends to the thread pool, by name."""
    calls: list[str] = []
    real = backend_module.run_in_threadpool

    async def recording(fn: Any, *args: Any) -> Any:
        calls.append(fn.__name__)
        return await real(fn, *args)

    monkeypatch.setattr(backend_module, "run_in_threadpool", recording)
    return calls


def test_pages_and_actions_with_an_asyncapp_twin_stay_on_the_event_loop(
    client, seeded: Seeded, thread_calls: list[str]
) -> None:
    q, c = seeded.queue, console(client, seeded.queue)
    app = zsched.App(client, queue=q)
    dead = app.dead_letters()
    for path in (f"/q/{q}/run?id=send-0001", f"/q/{q}/run?id={dead[0].run_id}",
                 f"/q/{q}/rule?id=tick", f"/q/{q}/dead", f"/q/{q}/dead?task=boom",
                 f"/q/{q}/dead/confirm?op=purge&reason=bad", f"/q/{q}/rule/remove?id=tick"):  # fmt: skip
        assert c.get(path, headers=AUTH).status_code == 200, path
    # boom-0's reason (the seeded runs die in any order: dead[0] need not be boom-0)
    assert "bad input 0" in c.get(f"/q/{q}/run?id=boom-0", headers=AUTH).text
    steps = [
        ("cancel", {"run_id": "send-0001"}, "cancelled run send-0001"),
        ("reschedule", {"run_id": "send-0002", "in": "30"}, "run send-0002 now waits until"),
        ("pause", {"schedule_id": "tick", "note": "n"}, "paused rule tick"),
        ("resume", {"schedule_id": "tick"}, "resumed rule tick"),
        ("edit", {"schedule_id": "tick", "kind": "every", "every": "120"}, "saved rule tick"),
        ("run-now", {"schedule_id": "nightly"}, "rule nightly fired now as nightly@manual:"),
        ("backfill", {"schedule_id": "nightly", "start": "2026-01-01T00:00",
                      "end": "2026-01-02T00:00"}, "backfill of nightly: 1 run(s) enqueued"),
        ("replay", {"one": dead[0].entry_id}, "replayed: "),
        ("purge", {"one": dead[1].entry_id}, "purged 1 dead letter(s)"),
        ("replay-matching", {"task": "nope"}, "no dead letter matches"),
        ("purge-matching", {"task": "boom"}, "purged 1 dead letter(s)"),
        ("pause-queue", {"note": "deploy"}, f"paused queue {q}"),
        ("resume-queue", {}, f"resumed queue {q}"),
        ("remove", {"schedule_id": "tick", "confirm": "tick"}, "removed rule tick"),
    ]  # fmt: skip
    for action, data, said in steps:
        r = post(c, q, action, data, page=f"/q/{q}/dead")
        assert r.status_code == 303, action
        # The message shows on the next page: read it on one served on the event loop.
        body = c.get(f"/q/{q}/dead", headers=AUTH).text
        assert re.search('id="flash">' + re.escape(said), body), (action, body[:300])
    assert thread_calls == []
    assert app.get_run("send-0001").state == "cancelled" and app.status().dead == 0
    assert "tick" not in {i.schedule_id for i in app.schedules()}
    # What AsyncApp has no method for keeps the sync path, in the thread pool.
    for path in ("/", f"/q/{q}/runs", f"/q/{q}/rules",
                 f"/q/{q}/rule?id=nightly&from=2026-01-01T00:00&to=2026-01-03T00:00"):  # fmt: skip
        assert c.get(path, headers=AUTH).status_code == 200
    assert set(thread_calls) == set(THREAD_PATH)


def test_each_event_loop_closes_its_asyncio_clients_when_it_ends(
    client, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []
    real = AsyncApp.aclose

    async def recording(self: AsyncApp) -> None:
        closed.append(self.queue)
        await real(self)

    monkeypatch.setattr(AsyncApp, "aclose", recording)
    q, c = seeded.queue, console(client, seeded.queue)
    for _ in range(3):  # the TestClient runs each request on an event loop of its own
        assert c.get(f"/q/{q}/run?id=send-0001", headers=AUTH).status_code == 200
    assert closed == [q, q, q]
    with c:  # one loop for every request: one AsyncApp, closed with the loop
        for _ in range(3):
            assert c.get(f"/q/{q}/dead", headers=AUTH).status_code == 200
        assert closed == [q, q, q]
    assert closed == [q, q, q, q]
