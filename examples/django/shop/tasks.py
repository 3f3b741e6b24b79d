"""The shop's tasks: ordinary django.tasks functions; zsched runs them."""

from __future__ import annotations

import os
from typing import Any

import redis

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # the backport, Django 4.2-5.2

# Where the tasks leave a trace the tests can read (the shop's own Redis in real life).
_trace = redis.Redis.from_url(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"))


@task()
def send_receipt(order_id: int, email: str) -> dict[str, object]:
    """Mail a receipt; returns what a caller may read back from get_result()."""
    _trace.rpush("shop-test:receipts", f"{order_id}:{email}")
    return {"order": order_id, "sent_to": email}


@task(queue_name="emails")
def send_newsletter(issue: int) -> int:
    _trace.rpush("shop-test:newsletters", issue)
    return issue


@task(takes_context=True)
def charge(context: object, amount: int) -> str:
    attempt = getattr(context, "attempt", 0)
    if amount < 0:
        raise ValueError(f"cannot charge {amount}")
    return f"charged {amount} (attempt {attempt})"


@task(takes_context=True)
def flaky_once(context: Any) -> int:
    """Fails its first attempt (with MAX_ATTEMPTS > 1, zsched retries it)."""
    if context.attempt == 1:
        raise ConnectionError("the payment provider timed out")
    return int(context.attempt)


@task()
async def warm_cache(key: str) -> str:
    return key.upper()


@task()
def nightly_report(kind: str) -> str:
    _trace.rpush("shop-test:reports", kind)
    return kind


@task(takes_context=True)
def heartbeat(context: Any) -> None:
    """Every second (PERIODIC_TASKS): the result id is zsched's run id, heartbeat@<slot>."""
    _trace.rpush("shop-test:heartbeats", context.task_result.id)


def not_a_task() -> None:
    """A plain function: no worker ever runs it, whatever a payload says."""
    _trace.rpush("shop-test:not-a-task", "ran")
