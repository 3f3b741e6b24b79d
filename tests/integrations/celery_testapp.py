"""A small Celery project for the bridge tests: its worker records every task it runs in
Redis, so a test can count executions per run id. Configured from the environment:
CELERY_TEST_BROKER (broker URL), CELERY_TEST_REDIS (where runs are recorded, also zsched's
Redis), CELERY_TEST_QUEUE (the Celery queue)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

from zsched.integrations.celery import install_overlap_hook


def records_key(queue: str) -> str:
    return f"celery-test:{queue}:ran"


def started_key(queue: str) -> str:
    return f"celery-test:{queue}:started"


def make_app(broker: str, record_url: str, queue: str) -> Celery:
    app = Celery("celery_testapp", broker=broker)
    app.conf.update(
        timezone="Europe/Berlin",
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        broker_transport_options={"confirm_publish": True} if broker.startswith("amqp") else {},
    )
    rec = redis.Redis.from_url(record_url)

    def note(key: str, task: Any, args: Any, kwargs: Any) -> None:
        req = task.request
        info = req.delivery_info or {}
        rec.rpush(key, json.dumps({
            "id": req.id, "args": list(args), "kwargs": kwargs,
            "expires": str(req.expires) if req.expires else None,
            "routing_key": info.get("routing_key"), "priority": info.get("priority"),
            "headers": {k: v for k, v in (req.headers or {}).items() if k.startswith("x-")},
        }))  # fmt: skip

    @app.task(bind=True, name="proj.record")
    def record(self: Any, *args: Any, **kwargs: Any) -> str:
        note(records_key(queue), self, args, kwargs)
        return "ok"

    @app.task(bind=True, name="proj.hold")
    def hold(self: Any, release_key: str) -> str:
        note(started_key(queue), self, [release_key], {})
        while not rec.exists(release_key):
            time.sleep(0.05)
        note(records_key(queue), self, [release_key], {})
        return "released"

    install_overlap_hook(app, record_url)
    beat_every = os.environ.get("CELERY_TEST_BEAT_SECONDS")
    if beat_every:  # for the Beat drop-in test: one entry, zsched's queue from the env
        app.conf.beat_schedule = {
            os.environ["CELERY_TEST_BEAT_ENTRY"]: {
                "task": "proj.record", "schedule": float(beat_every), "args": ["beat"],
            }
        }  # fmt: skip
        app.conf.zsched_redis_url = record_url
        app.conf.zsched_queue = os.environ["CELERY_TEST_ZSCHED_QUEUE"]
    return app


app = make_app(
    os.environ.get("CELERY_TEST_BROKER", "redis://127.0.0.1:1/0"),
    os.environ.get("CELERY_TEST_REDIS", "redis://127.0.0.1:1/0"),
    os.environ.get("CELERY_TEST_QUEUE", "celery"),
)
