"""Rendering: the Jinja environment (autoescape on for every template), URLs under the mount
prefix, flash messages, and the headers every response carries."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

import zsched.web.words as words
from zsched.store.connection import redact_text
from zsched.web.auth import CSRF_COOKIE, csrf_token

FLASH_COOKIE = "zsched_flash"
#: No inline script or style, nothing from elsewhere: an injected tag cannot run.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("zsched.web", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(iso=words.iso_utc, zone=words.in_zone, age=words.age, why=words.why,
                       redact=redact_text)  # fmt: skip
    return env


def prefix(request: Request) -> str:
    """Where the console is mounted ('' at the root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def href(request: Request, *segments: str, **query: Any) -> str:
    """A URL of the console: path segments quoted one by one, empty query values dropped."""
    path = "/".join(quote(str(s), safe="") for s in segments)
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return f"{prefix(request)}/{path}" + (f"?{urlencode(q, doseq=True)}" if q else "")


def secure(response: Response) -> Response:
    response.headers.update(HEADERS)
    return response


def redirect(request: Request, url: str, flash: tuple[str, str] | None = None) -> Response:
    resp = RedirectResponse(url, status_code=303)
    if flash is not None:
        value = base64.urlsafe_b64encode(json.dumps(flash).encode()).decode()
        resp.set_cookie(FLASH_COOKIE, value, max_age=60, path=prefix(request) or "/",
                        httponly=True, samesite="strict")  # fmt: skip
    return secure(resp)


def _flash(request: Request) -> tuple[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        kind, text = json.loads(base64.urlsafe_b64decode(raw.encode()))
        return str(kind), str(text)
    except (ValueError, TypeError):
        return None


def page(request: Request, template: str, status: int = 200, **ctx: Any) -> Response:
    """Render a page with the context every page shares (mode banner, CSRF token, nav)."""
    st = request.app.state.console
    token, fresh = csrf_token(request)
    flash = _flash(request)
    body = st.env.get_template(template).render(
        request=request, href=lambda *s, **q: href(request, *s, **q), csrf=token,
        read_only=st.read_only, read_only_reason=st.read_only_reason, queues=st.queues,
        login=st.creds.enabled, flash=flash, redis_label=st.redis_label,
        pauses=getattr(request.state, "pauses", {}), **ctx,
    )  # fmt: skip
    resp = HTMLResponse(body, status_code=status)
    if fresh:
        resp.set_cookie(CSRF_COOKIE, token, path=prefix(request) or "/", httponly=True,
                        samesite="strict")  # fmt: skip
    if flash is not None:
        resp.delete_cookie(FLASH_COOKIE, path=prefix(request) or "/")
    return secure(resp)
