"""Data for the console's tests: delayed runs, rules with ledgers and dead letters, with
script-injection strings in run ids, payloads, reasons and rule ids (entered through Python;
test_console_clients.py adds the Node and shell clients)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import zsched
from zsched import Fail, FakeClock
from zsched.observability.metrics import Metrics

M = 60_000
# The console's credentials in the tests (imported from here: every tests/ folder has a
# conftest, so `from conftest import` finds whichever was imported first in a whole run).
TOKEN = "t0ken-for-tests"
CREDS = {"ZSCHED_WEB_TOKEN": TOKEN, "ZSCHED_WEB_USER": "ops", "ZSCHED_WEB_PASSWORD": "pw"}
#: If any of these ran, the page would set window.__xss (the browser tests check it never is).
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
XSS_RUN = "run-" + XSS
XSS_RULE = "rule-" + XSS.replace("@", "")
XSS_REASON = "reason-" + XSS


@dataclass
class Seeded:
    queue: str
    now_ms: int
    delayed: list[str] = field(default_factory=list)
    dead_run_ids: list[str] = field(default_factory=list)


def server_ms(client: Any) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


async def seed(client: Any, aclient: Any, queue: str, delayed: int = 150) -> Seeded:
    """Fill `queue`: `delayed` runs due in the next hours (one with a hostile id and payload),
    three rules whose ledgers hold ran, skipped (overlap), coalesced and ran_late rows, and
    three dead letters (one with a hostile reason)."""
    now = server_ms(client)
    clock = FakeClock(now - 10 * M)
    app = zsched.App(client, queue=queue, clock=clock, metrics=Metrics())

    @app.task(name="boom")
    def boom(payload: Any) -> None:
        raise Fail(XSS_REASON if payload.get("hostile") else f"bad input {payload['n']}")

    @app.task(name="report")
    def report(payload: Any) -> None:
        pass

    app.schedule("nightly", "report", cron="30 2 * * *", tz="Europe/Berlin")
    app.schedule("tick", "report", every=60, overlap="skip", payload={"note": XSS})
    app.schedule(XSS_RULE, "report", every=3600)
    d = app.dispatcher(redis=aclient)
    for i in range(4):  # tick fires, then skips while its run is still "running"
        clock.set(now - 10 * M + i * M + 1)
        await d.tick()
    clock.set(now)  # five minutes missed: coalesced into one late run (held by overlap skip)
    await d.tick()
    s = Seeded(queue, now)
    items = [{"task": "send", "payload": {"i": i, "html": XSS}, "run_at": (now + M * (60 + i)) / 1000,
              "run_id": f"send-{i:04d}"} for i in range(delayed)]  # fmt: skip
    items.append({"task": "send", "payload": {"html": XSS}, "run_at": (now + 30 * M) / 1000,
                  "run_id": XSS_RUN})  # fmt: skip
    app.enqueue_many(items)
    s.delayed = [str(x["run_id"]) for x in items]
    for i in range(3):
        rid = f"boom-{i}"
        app.enqueue("boom", {"n": i, "hostile": i == 2}, run_at=now / 1000, run_id=rid)
        s.dead_run_ids.append(rid)
    await d.tick()
    w = app.worker(redis=aclient)
    await w.tick()
    await w.close()
    await d.close()
    return s
