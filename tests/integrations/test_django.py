"""examples/django under Django's own test runner against the suite's redis-server: the
django-tasks backport on this Python (Django 4.2-5.2), and Django 6's django.tasks in the
Python 3.12 venv that `make django6-venv` makes; then its management commands as processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from celery_harness import ROOT, stop, wait_for

EXAMPLE = ROOT / "examples" / "django"
DJANGO6_PY = ROOT / ".venv-django6" / "bin" / "python"


def env(redis_url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "ZSCHED_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT),
            "SHOP_QUEUE_PREFIX": f"shop-{uuid.uuid4().hex[:8]}-", **extra}  # fmt: skip


def manage(
    python: str | Path, e: dict[str, str], *args: str, **kw
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "manage.py", *args], cwd=EXAMPLE, env=e, text=True,
                          capture_output=True, timeout=300, **kw)  # fmt: skip


def test_djangos_test_runner_passes_with_the_backport(redis_url):
    r = manage(sys.executable, env(redis_url), "test", "shop", "-v", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Ran 13 tests" in r.stderr and "\nOK" in r.stderr, r.stderr


def test_djangos_test_runner_passes_on_django_6(redis_url):
    if not DJANGO6_PY.exists():
        pytest.fail(
            "no .venv-django6: run `make django6-venv` (needs Python 3.12+; the make "
            "target says why it could not make it)"
        )
    version = subprocess.run([str(DJANGO6_PY), "-c", "import django; print(django.VERSION[0])"],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert version == "6"
    r = manage(DJANGO6_PY, env(redis_url), "test", "shop")
    assert r.returncode == 0 and "Ran 13 tests" in r.stderr, r.stdout + r.stderr


def test_the_management_commands_run_tasks_and_periodic_tasks(redis_url):
    e = env(redis_url)
    trace = redis.Redis.from_url(redis_url)
    trace.delete("shop-test:heartbeats", "shop-test:receipts")
    procs = [subprocess.Popen([sys.executable, "manage.py", cmd], cwd=EXAMPLE, env=e,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for cmd in ("zsched_dispatcher", "zsched_dispatcher", "zsched_worker")]  # fmt: skip
    try:
        code = ("from shop.tasks import send_receipt; "
                "print(send_receipt.enqueue(9, email='m@example.com').id)")  # fmt: skip
        r = manage(sys.executable, e, "shell", "-c", code)
        assert r.returncode == 0, r.stderr
        rid = r.stdout.strip().splitlines()[-1]
        wait_for(lambda: trace.llen("shop-test:receipts") >= 1, "the receipt task to run")
        # The periodic task from settings, synced by both dispatchers, fires once per slot.
        wait_for(lambda: trace.llen("shop-test:heartbeats") >= 3, "three heartbeats")
        check = ("from shop.tasks import send_receipt; "
                 f"r = send_receipt.get_result('{rid}'); print(r.status, r.return_value)")  # fmt: skip
        r = manage(sys.executable, e, "shell", "-c", check)
        assert r.stdout.strip().splitlines()[-1] == (
            "SUCCESSFUL {'order': 9, 'sent_to': 'm@example.com'}"
        ), r.stdout + r.stderr
    finally:
        outs = [stop(p) for p in procs]
    assert trace.lrange("shop-test:receipts", 0, -1) == [b"9:m@example.com"], outs
    assert not any("Traceback" in o for o in outs), outs
    beats = [b.decode() for b in trace.lrange("shop-test:heartbeats", 0, -1)]
    assert all(b.startswith("heartbeat@") for b in beats) and len(set(beats)) == len(beats), beats
    trace.close()
