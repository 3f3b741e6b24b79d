"""Hostile strings written by the Node.js and shell clients (examples/node, examples/shell)
render as text in the console: run ids, payloads, task names and dead-letter reasons."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis
from console_seed import CREDS, TOKEN, XSS
from starlette.testclient import TestClient

import zsched
from tests.integration.conftest import node_dir  # noqa: F401  (the fixture)
from tests.integration.test_cross_language import node_enqueue, node_worker, shell_enqueue
from zsched.observability.metrics import Metrics
from zsched.web import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_strings_from_the_node_and_shell_clients_are_escaped(client, redis_url, queue,
                                                             node_dir) -> None:  # noqa: F811  # fmt: skip
    payload = json.dumps({"html": XSS})
    node_id, shell_id = "node-" + XSS, "shell-" + XSS
    node_enqueue(node_dir, redis_url, queue, "--task", "send", "--payload", payload,
                 "--run-id", node_id, "--delay-ms", "600000")  # fmt: skip
    shell_enqueue(redis_url, queue, "--task", "send", "--payload", payload, "--run-id", shell_id,
                  "--delay-ms", "600000")  # fmt: skip
    # A task no worker knows, run by the Node worker: dead-lettered with the task in its reason.
    node_enqueue(node_dir, redis_url, queue, "--task", "task-" + XSS, "--payload", payload,
                 "--run-id", "dead-node")  # fmt: skip
    app = zsched.App(client, queue=queue, metrics=Metrics())

    async def dispatch() -> None:
        ac = aioredis.Redis.from_url(redis_url, protocol=2)
        d = app.dispatcher(redis=ac)
        await d.tick()
        await d.close()
        await ac.aclose()

    asyncio.run(dispatch())
    (out,) = node_worker(node_dir, redis_url, queue)
    assert out["outcome"] == "dead" and XSS in out["reason"]
    c = TestClient(create_app(app, environ=CREDS))
    escaped = "&lt;script&gt;window.__xss=1&lt;/script&gt;"
    for path, params in [(f"/q/{queue}/runs", {}), (f"/q/{queue}/run", {"id": node_id}),
                         (f"/q/{queue}/run", {"id": shell_id}), (f"/q/{queue}/dead", {}),
                         (f"/q/{queue}/run", {"id": "dead-node"}), ("/", {})]:  # fmt: skip
        body = c.get(path, params=params, headers=AUTH).text
        assert "<script>window.__xss" not in body and "<img src=x" not in body, path
        if path != "/":
            assert escaped in body, (path, params)
    assert app.get_run(node_id).state == "scheduled" and app.get_run("dead-node").state == "dead"


def test_pause_notes_from_the_command_line_are_escaped(client, redis_url, queue) -> None:
    """The Node and shell clients have no pause; the `zsched` command line writes the notes."""
    from zsched.cli.main import main

    app = zsched.App(client, queue=queue, metrics=Metrics())
    app.schedule("nightly", "report", cron="0 2 * * *", tz="UTC")
    base = ["--redis", redis_url, "--queue", queue]
    assert main(["pause", "--note", "cli-" + XSS, *base]) == 0
    assert main(["schedules", "pause", "nightly", "--note", "cli-rule-" + XSS, *base]) == 0
    assert app.status().pause_note == "cli-" + XSS
    c = TestClient(create_app(app, environ=CREDS))
    for path in ("/", f"/q/{queue}/rules", f"/q/{queue}/rule?id=nightly", f"/q/{queue}/dead"):
        body = c.get(path, headers=AUTH).text
        assert "<script>window.__xss" not in body and "<img src=x" not in body, path
        assert "cli-&lt;script&gt;window.__xss=1&lt;/script&gt;" in body, path
    assert "cli-rule-&lt;script&gt;" in c.get(f"/q/{queue}/rules", headers=AUTH).text
