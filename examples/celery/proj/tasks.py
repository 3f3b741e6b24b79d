"""The project's tasks: nothing in them knows about zsched."""

from __future__ import annotations

import logging
import os
from typing import Any

import redis
from celery import shared_task

log = logging.getLogger(__name__)
_bucket = redis.Redis.from_url(os.environ.get("TOKENS_REDIS_URL", "redis://127.0.0.1:6379/2"))


@shared_task(name="proj.tasks.backup_database")
def backup_database() -> None:
    log.info("backing up the database")


@shared_task(name="proj.tasks.cleanup")
def cleanup() -> None:
    log.info("deleting expired sessions")


@shared_task(bind=True, name="proj.tasks.refill_tokens")
def refill_tokens(self: Any, amount: int) -> int:
    """Top up the API rate-limit bucket; the task id (a zsched run id) names the slot."""
    _bucket.rpush("refills", self.request.id)
    return int(_bucket.incrby("tokens", amount))


@shared_task(name="proj.tasks.send_digest")
def send_digest(kind: str) -> None:
    log.info("sending the %s digest", kind)
