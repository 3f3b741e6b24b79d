"""The zsched side of the example: the queue and its task. Run the worker (from the repo root):

    zsched worker examples.fastapi.tasks:zapp
    zsched dispatcher
"""

from __future__ import annotations

import logging
import os

import redis

import zsched

log = logging.getLogger(__name__)
zapp = zsched.App(os.environ.get("ZSCHED_REDIS_URL"), queue=os.environ.get("ZSCHED_QUEUE", "reminders"))
#: Where the example's "e-mails" go: a Redis list the test reads (an SMTP call in real life).
OUTBOX = os.environ.get("REMINDER_OUTBOX", "reminders:outbox")
_outbox: redis.Redis | None = None


@zapp.task(name="send_reminder", max_attempts=5, backoff=2.0)
def send_reminder(payload: dict[str, str]) -> None:
    """E-mail a learner 24 h before the class; the run id makes a second send a duplicate."""
    global _outbox
    if _outbox is None:
        _outbox = redis.Redis.from_url(os.environ.get("ZSCHED_REDIS_URL") or "redis://127.0.0.1:6379/0")
    run = zsched.current_run()
    _outbox.rpush(OUTBOX, f"{run.run_id} {payload['learner']} {payload['class_starts_at']}")
    log.info("reminded %s of class %s", payload["learner"], payload["class_id"])
