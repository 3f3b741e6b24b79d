"""The ASGI app factory: `create_app` builds the console over one or more queues.

Mount it anywhere: `Mount("/ops", app=create_app(...))` in Starlette or FastAPI (or any ASGI
router); every URL it makes carries the mount prefix.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from zsched.app import App
from zsched.store.connection import redact, sync_client
from zsched.web.actions import act
from zsched.web.aio_backend import AsyncBackend
from zsched.web.auth import (
    SESSION_COOKIE,
    SESSION_MAX_AGE_S,
    TOKEN_PRINCIPAL,
    Credentials,
    csrf_ok,
)
from zsched.web.backend import Console, SyncBackend
from zsched.web.health import Thresholds
from zsched.web.pages import (
    dead,
    dead_confirm,
    guarded,
    overview,
    overview_json,
    rule,
    rule_remove,
    rules,
    run,
    runs,
)
from zsched.web.render import environment, href, page, prefix, redirect

NO_CREDENTIALS = ("no credentials are configured (set ZSCHED_WEB_TOKEN, or ZSCHED_WEB_USER "
                  "and ZSCHED_WEB_PASSWORD, to enable actions)")  # fmt: skip
READ_ONLY_FLAG = "the console was started read-only"


@dataclass
class ConsoleState:
    """What every request finds in `request.app.state.console`."""

    console: Console
    queues: list[str]
    creds: Credentials
    read_only: bool
    read_only_reason: str
    env: jinja2.Environment
    #: The Redis the console reads, as shown on pages: credentials redacted.
    redis_label: str


def create_app(
    apps: App | Sequence[App] | None = None,
    *,
    redis: str | None = None,
    queues: Sequence[str] = ("default",),
    read_only: bool = False,
    environ: Mapping[str, str] | None = None,
    thresholds: Thresholds | None = None,
) -> Starlette:
    """The console as an ASGI app.

    Give the `App`s to serve (one per queue), or a Redis URL and queue names (partition counts
    are read from Redis). Credentials come from `environ` (default: `os.environ`, see
    zsched.web.auth); without any the console is read-only. `read_only=True` leaves out every
    action endpoint."""
    if apps is None:
        url = redis or os.environ.get("ZSCHED_REDIS_URL") or "redis://127.0.0.1:6379/0"
        client = sync_client(url)
        apps = [App(client, queue=q, partitions="auto") for q in queues]
        label = redact(url)
    else:
        apps = [apps] if isinstance(apps, App) else list(apps)
        first = apps[0].url if apps else None
        label = redact(first) if first else "the client given by the host app"
    creds = Credentials.from_env(os.environ if environ is None else environ)
    reason = READ_ONLY_FLAG if read_only else ("" if creds.enabled else NO_CREDENTIALS)
    backend = AsyncBackend(SyncBackend.build(list(apps), thresholds))
    state = ConsoleState(Console(backend), [a.queue for a in apps], creds, bool(reason), reason,
                         environment(), label)  # fmt: skip
    app = Starlette(routes=_routes(state))
    app.state.console = state
    return app


def _routes(state: ConsoleState) -> list[Any]:
    routes: list[Any] = [
        Route("/", overview, name="overview"),
        Route("/api/overview", overview_json),
        Route("/q/{queue}/runs", runs),
        Route("/q/{queue}/run", run),
        Route("/q/{queue}/rules", rules),
        Route("/q/{queue}/rule", rule),
        Route("/q/{queue}/rule/remove", rule_remove),
        Route("/q/{queue}/dead", dead),
        Route("/q/{queue}/dead/confirm", dead_confirm),
        Mount("/static", app=StaticFiles(packages=[("zsched.web", "static")]), name="static"),
    ]
    if state.creds.enabled:
        routes += [Route("/login", login_form), Route("/login", login, methods=["POST"]),
                   Route("/logout", logout, methods=["POST"])]  # fmt: skip
    if not state.read_only:
        routes.append(Route("/q/{queue}/act/{name}", act, methods=["POST"]))
    return routes


def _safe_next(request: Request, nxt: str) -> str:
    """Only a path of this console (no scheme, no host): never an open redirect."""
    parts = urlsplit(nxt)
    if parts.scheme or parts.netloc or not nxt.startswith((prefix(request) or "") + "/"):
        return href(request, "")
    return nxt


async def login_form(request: Request) -> Response:
    st = request.app.state.console
    return page(request, "login.html", next=request.query_params.get("next", ""),
                basic=st.creds.basic, error=None)  # fmt: skip


async def login(request: Request) -> Response:
    st = request.app.state.console
    form = await request.form()
    token, user, password = (str(form.get(k) or "") for k in ("token", "user", "password"))
    nxt = _safe_next(request, str(form.get("next") or ""))
    if not csrf_ok(request, str(form.get("csrf") or "")):
        return page(request, "login.html", status=403, next=nxt, basic=st.creds.basic,
                    error="the form is stale: try again")  # fmt: skip
    ok = st.creds.check_token(token) if token else st.creds.check_user(user, password)
    if not ok:
        return page(request, "login.html", status=401, next=nxt, basic=st.creds.basic,
                    error="wrong credentials")  # fmt: skip
    resp = redirect(request, nxt)
    who = TOKEN_PRINCIPAL if token else user
    resp.set_cookie(SESSION_COOKIE, st.creds.session_value(int(time.time()), who),
                    max_age=SESSION_MAX_AGE_S, path=prefix(request) or "/", httponly=True,
                    samesite="strict", secure=request.url.scheme == "https")  # fmt: skip
    return resp


@guarded
async def logout(request: Request, st: Any) -> Response:
    form = await request.form()
    if not csrf_ok(request, str(form.get("csrf") or "")):
        return page(request, "error.html", status=403, message="stale form")
    resp = redirect(request, href(request, ""))
    resp.delete_cookie(SESSION_COOKIE, path=prefix(request) or "/")
    return resp
