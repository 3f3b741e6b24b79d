"""examples/fastapi through an ASGI test client (lifespan included) against a real
redis-server, with a real zsched worker and dispatcher as processes."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
import redis
from celery_harness import ROOT, stop, wait_for
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import zsched
from zsched.integrations.starlette import zsched_app, zsched_lifespan


@pytest.fixture
def example(redis_url, queue, monkeypatch):
    outbox = f"reminders-test:{queue}"
    for k, v in {"ZSCHED_REDIS_URL": redis_url, "ZSCHED_QUEUE": queue,
                 "REMINDER_OUTBOX": outbox}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    for name in ("examples.fastapi.app", "examples.fastapi.tasks"):
        sys.modules.pop(name, None)
    mod = importlib.import_module("examples.fastapi.app")
    yield mod, outbox
    mod.zapp.close()


def proc(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "zsched", *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def test_reminders_are_scheduled_moved_and_cancelled_through_the_api(example, redis_url, queue):
    mod, outbox = example
    r = redis.Redis.from_url(redis_url)
    now = datetime.now(UTC)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)  # zsched keeps ms
    soon, later = now + timedelta(hours=24, seconds=1), now + timedelta(hours=48)
    procs = [proc("worker", "examples.fastapi.tasks:zapp", "--redis", redis_url, "--queue", queue),
             proc("dispatcher", "--redis", redis_url, "--queue", queue)]  # fmt: skip
    try:
        with TestClient(mod.api) as client:
            url = "/classes/{}/reminders/ada"
            first = client.post(url.format("py101"), json={"starts_at": soon.isoformat()})
            assert first.status_code == 201 and first.json()["duplicate"] is False
            again = client.post(url.format("py101"), json={"starts_at": soon.isoformat()})
            assert again.json()["duplicate"] is True  # a retried POST sends one e-mail
            made = client.post(url.format("rust1"), json={"starts_at": later.isoformat()})
            assert made.status_code == 201
            state = client.get(url.format("rust1")).json()
            assert state["state"] == "scheduled"
            assert datetime.fromisoformat(state["remind_at"]) == later - timedelta(hours=24)
            moved = client.put(url.format("rust1"), json={"starts_at": soon.isoformat()})
            assert moved.status_code == 200, moved.text
            assert (
                client.post(url.format("go1"), json={"starts_at": later.isoformat()}).status_code
                == 201
            )
            assert client.delete(url.format("go1")).status_code == 204
            assert client.get(url.format("go1")).json()["state"] == "cancelled"  # kept a while
            assert client.delete(url.format("go1")).status_code == 409
            naive = client.post(url.format("x"), json={"starts_at": "2027-01-01T10:00"})
            assert naive.status_code == 422 and "time zone" in naive.text
            wait_for(lambda: r.llen(outbox) >= 2, "both reminders sent by the worker")
            wait_for(lambda: client.get(url.format("rust1")).json()["state"] == "done", "done")
            late = client.put(url.format("rust1"), json={"starts_at": later.isoformat()})
            assert late.status_code == 409, late.text  # sent already: not replaced
    finally:
        outs = [stop(p) for p in procs]
    sent = sorted(x.decode() for x in r.lrange(outbox, 0, -1))
    assert [s.split()[0] for s in sent] == ["reminder:py101:ada", "reminder:rust1:ada"], outs
    assert sent[1].split()[2] == soon.isoformat()  # the moved class's time
    assert not any("Traceback" in o for o in outs), outs
    r.close()


async def home(request):
    zs = zsched_app(request)
    rid = await zs.enqueue("t", {"n": 1}, delay=3600)
    moved = await zs.reschedule(rid, delay=7200)  # the run controls, awaited
    kept = await zs.enqueue("t", {"n": 2}, run_id=rid, delay=60, on_conflict="replace")
    return JSONResponse({"run_id": rid, "state": (await zs.get_run(rid)).state,
                         "kind": type(zs).__name__, "moved": moved.outcome.name,
                         "replaced": kept.replaced})  # fmt: skip


def test_the_lifespan_opens_an_app_at_start_up_and_closes_it_at_shutdown(redis_url, queue):
    made: list[zsched.App] = []
    closed: list[bool] = []

    def factory() -> zsched.App:
        app = zsched.App(redis_url, queue=queue)
        real_close = app.close
        app.close = lambda: (closed.append(True), real_close())  # type: ignore[method-assign]
        made.append(app)
        return app

    asgi = Starlette(routes=[Route("/", home)], lifespan=zsched_lifespan(factory))
    assert made == []  # nothing opens before start-up
    with TestClient(asgi) as client:
        assert len(made) == 1 and closed == []
        body = client.get("/").json()
        assert body["state"] == "scheduled"
        assert body["kind"] == zsched.AsyncApp.__name__
        assert body["moved"] == "MOVED" and body["replaced"] is True
        assert made[0].get_run(body["run_id"]).state == "scheduled"
    assert closed == [True]


def test_an_endpoint_without_the_lifespan_gets_a_clear_error():
    asgi = Starlette(routes=[Route("/", home)])
    with (
        TestClient(asgi, raise_server_exceptions=True) as client,
        pytest.raises(RuntimeError, match="lifespan=zsched_lifespan"),
    ):
        client.get("/")
