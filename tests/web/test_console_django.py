"""The console mounted inside a Django project through ASGI (the recipe of docs/console.md),
served by a real uvicorn over HTTP: Django still serves its pages, the console's pages carry
the mount prefix in every link, a POST action with its CSRF token works (and without it is
refused), and the read-only mount has no action endpoint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_seed import TOKEN
from test_console_http import free_port

import zsched

# Django comes with the test extra (pyproject.toml); django_console_site imports it.

HERE = Path(__file__).parent
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def django_site(redis_url: str, queue: str) -> Iterator[str]:
    """uvicorn serving django_console_site:application on a free port; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZSCHED_WEB_")}
    env.update(ZSCHED_REDIS_URL=redis_url, CONSOLE_QUEUE=queue, ZSCHED_WEB_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "django_console_site:application",
                             "--app-dir", str(HERE), "--port", str(port), "--log-level",
                             "warning"], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/", timeout=5)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.communicate(timeout=10)[1]) from None
                time.sleep(0.1)  # polling a starting process for its port
        yield base
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_the_console_mounted_in_django_through_asgi(django_site: str, redis_url: str, queue):
    app = zsched.App(redis_url, queue=queue)
    app.enqueue("send", {"n": 1}, delay=3600, run_id="r1")
    app.enqueue("send", {"n": 2}, delay=3600, run_id="r2")
    with httpx.Client(base_url=django_site, timeout=30) as c:
        # Django's own pages, beside the console.
        assert c.get("/orders/").text == "the django site at /orders/"
        page = c.get("/ops/", headers=AUTH)
        assert page.status_code == 200 and queue in page.text
        links = re.findall(r'(?:href|action|src)="([^"]+)"', page.text)
        assert links and all(u.startswith("/ops/") for u in links), links
        assert c.get("/ops/static/console.js").status_code == 200
        run = c.get(f"/ops/q/{queue}/run", params={"id": "r1"}, headers=AUTH)
        assert run.status_code == 200 and "scheduled" in run.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', run.text).group(1)  # type: ignore[union-attr]
        # A POST without the form's token is refused; with it, the action runs.
        r = c.post(f"/ops/q/{queue}/act/cancel", data={"run_id": "r1"}, headers=AUTH)
        assert r.status_code == 403 and app.get_run("r1").state == "scheduled"
        r = c.post(
            f"/ops/q/{queue}/act/cancel",
            data={"csrf": csrf, "run_id": "r1"},
            headers={**AUTH, "Origin": django_site},
        )  # a browser's form post sends it
        assert r.status_code == 303 and r.headers["location"].startswith(f"/ops/q/{queue}/run?")
        assert app.get_run("r1").state == "cancelled"
        assert "cancelled run r1" in c.get(r.headers["location"], headers=AUTH).text
        # The read-only mount: pages say so, and the action endpoint does not exist.
        ro = c.get("/ops-ro/", headers=AUTH)
        assert ro.status_code == 200 and "Read-only" in ro.text
        assert all(u.startswith("/ops-ro/") for u in re.findall(r'href="([^"]+)"', ro.text))
        r = c.post(f"/ops-ro/q/{queue}/act/cancel", data={"csrf": csrf, "run_id": "r2"},
                   headers=AUTH)  # fmt: skip
        assert r.status_code == 404 and app.get_run("r2").state == "scheduled"
    app.close()
