"""The worker app of the two-dispatchers-two-workers Prometheus test (test_prometheus_truth)."""

from __future__ import annotations

import os

import zsched

app = zsched.App(os.environ.get("ZSCHED_REDIS_URL", "redis://127.0.0.1:6379/0"), queue="signals")


@app.task(name="ok")
def ok(payload: object) -> None:
    pass


@app.task(name="flaky")
def flaky(payload: object) -> None:
    if zsched.current_run().attempt == 1:
        raise zsched.Retry(delay=0)


@app.task(name="bad")
def bad(payload: object) -> None:
    raise zsched.Fail("no such customer")
