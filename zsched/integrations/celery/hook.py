"""The worker hook: installed in the user's Celery worker, it tells the bridge when the task
of a fire finished, so a rule's overlap lease (skip, queue) lasts the task's whole life.

Only messages the bridge marked (header `zsched_wait`) are reported; every other task of the
worker is untouched. A retried task reports when its last attempt ends, not at each retry.
"""

from __future__ import annotations

import logging
from typing import Any

from zsched.integrations.celery.bridge import HEADER_PARTITION, HEADER_QUEUE, HEADER_WAIT
from zsched.protocol.keys import QueueKeys
from zsched.store.connection import sync_client

log = logging.getLogger(__name__)
#: The done report outlives a bridge that is down for a while (it reads it on redelivery).
DONE_TTL_MS = 86_400_000


def _header(req: Any, name: str) -> Any:
    headers = getattr(req, "headers", None)
    if isinstance(headers, dict) and name in headers:
        return headers[name]
    if isinstance(req, dict):
        return req.get(name)
    return getattr(req, name, None)


def done_key(req: Any, task_id: str) -> str | None:
    """The done list of a bridge-sent task that waits for it, else None."""
    if not _header(req, HEADER_WAIT):
        return None
    queue, part = _header(req, HEADER_QUEUE), _header(req, HEADER_PARTITION)
    if not isinstance(queue, str):
        return None
    keys = QueueKeys(queue, part if isinstance(part, int) else None)
    return keys.celery_done(task_id)


def install_overlap_hook(celery_app: Any, redis: Any = None) -> Any:
    """Connect Celery's task_postrun and task_revoked signals so that the bridge learns when
    a fire's task is over. `redis`: the zsched Redis (URL or client; default
    $ZSCHED_REDIS_URL). Call it where the Celery app is made, in the worker's process.
    Returns the handler (to disconnect in tests)."""
    from celery import signals

    from zsched.config import redis_url_from_env

    if redis is None:
        redis = redis_url_from_env() or "redis://127.0.0.1:6379/0"
    client = sync_client(redis) if isinstance(redis, str) else redis

    def report(key: str, state: str) -> None:
        try:
            pipe = client.pipeline(transaction=False)
            pipe.rpush(key, state)
            pipe.pexpire(key, DONE_TTL_MS)
            pipe.execute()
        except Exception:  # never fail the user's task over the report
            log.exception("zsched: could not report the end of a Celery task (%s)", key)

    def on_postrun(sender: Any = None, task_id: str | None = None, state: str | None = None,
                   **_: Any) -> None:  # fmt: skip
        if task_id is None or state == "RETRY" or sender is None:
            return  # a retry is sent again with the same id: its last attempt reports
        key = done_key(sender.request, task_id)
        if key is not None:
            report(key, state or "")

    def on_revoked(request: Any = None, expired: bool = False, **_: Any) -> None:
        task_id = getattr(request, "id", None) or getattr(request, "task_id", None)
        key = done_key(request, task_id) if task_id else None
        if key is not None:
            report(key, "EXPIRED" if expired else "REVOKED")

    signals.task_postrun.connect(on_postrun, weak=False)
    signals.task_revoked.connect(on_revoked, weak=False)
    return on_postrun
