"""The console's pages (GET only: no page changes state) and the guard every route passes."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any

import redis.exceptions
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import zsched.web.reads as reads
from zsched.clock import datetime_to_ms
from zsched.errors import NotFound, ZschedError
from zsched.store.connection import redact_text
from zsched.web.auth import authenticated
from zsched.web.render import href, page, redirect, secure

Handler = Callable[[Request, Any], Awaitable[Response]]


class SafeJSONResponse(JSONResponse):
    """JSON with <, > and & as \\u escapes: a hostile run id or rule id in the live refresh
    can never read as markup, even if a browser sniffed the response as HTML."""

    def render(self, content: Any) -> bytes:
        raw = super().render(content)
        return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def _error(request: Request, status: int, message: str) -> Response:
    if request.url.path.endswith("/api/overview"):
        return secure(SafeJSONResponse({"error": message}, status_code=status))
    return page(request, "error.html", status=status, message=message)


def guarded(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Credentials first (when configured), then the page; errors become pages that say what
    went wrong, with any Redis credentials removed."""

    @wraps(fn)
    async def endpoint(request: Request) -> Response:
        st = request.app.state.console
        if st.creds.enabled and not authenticated(request, st.creds, int(time.time())):
            return challenge(request, st)
        try:
            if request.method == "GET" and not request.url.path.endswith("/api/overview"):
                request.state.pauses = await st.console.call("pauses")  # shown on every page
            return await fn(request, st)
        except (NotFound, LookupError) as exc:
            return _error(request, 404, redact_text(str(exc).strip("'\"")))
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            return _error(request, 503, f"cannot reach Redis: {redact_text(str(exc))}")
        except (ZschedError, ValueError, redis.exceptions.ResponseError) as exc:
            return _error(request, 400, redact_text(str(exc)))

    return endpoint


def challenge(request: Request, st: Any) -> Response:
    """401: basic auth asks the browser; otherwise pages go to the login form."""
    if st.creds.basic or request.method != "GET" or request.url.path.endswith("/api/overview"):
        resp = _error(request, 401, "authentication required")
        if st.creds.basic:
            resp.headers["WWW-Authenticate"] = 'Basic realm="zsched", charset="UTF-8"'
        return resp
    nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return redirect(request, href(request, "login", next=nxt))


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None


def _instant(text: str, name: str) -> datetime:
    """A form's datetime (ISO-8601; without an offset it is UTC)."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{name}: expected a date and time like 2026-12-01T08:00, "
                         f"got {text!r}") from None  # fmt: skip
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


# -- pages ----------------------------------------------------------------------------------------


@guarded
async def overview(request: Request, st: Any) -> Response:
    data = [await st.console.call("overview", q) for q in st.queues]
    return page(request, "overview.html", overviews=data)


@guarded
async def overview_json(request: Request, st: Any) -> Response:
    data = [await st.console.call("overview", q) for q in st.queues]
    return secure(SafeJSONResponse({"queues": data}))


@guarded
async def runs(request: Request, st: Any) -> Response:
    q, qp = request.path_params["queue"], request.query_params
    if qp.get("id"):
        return redirect(request, href(request, "q", q, "run", id=qp["id"]))
    part = _int(qp.get("p"))
    pg = await st.console.call("delayed", q, part, qp.get("cursor", ""), qp.get("task", ""))
    app = st.console.backend.app(q)
    return page(request, "runs.html", queue=q, rows=pg.rows, next_cursor=pg.next_cursor,
                scanned=pg.scanned, task=qp.get("task", ""), partition=part,
                partitions=app.partitions, cursor=qp.get("cursor", ""))  # fmt: skip


@guarded
async def run(request: Request, st: Any) -> Response:
    q, rid = request.path_params["queue"], request.query_params.get("id", "")
    if not rid:
        return redirect(request, href(request, "q", q, "runs"))
    info = await st.console.call("run", q, rid)
    return page(request, "run.html", queue=q, run=info)


@guarded
async def rules(request: Request, st: Any) -> Response:
    q, qp = request.path_params["queue"], request.query_params
    part = _int(qp.get("p"))
    data = await st.console.call("rules", q, part, _int(qp.get("cursor")), qp.get("match", ""))
    app = st.console.backend.app(q)
    return page(request, "rules.html", queue=q, partition=part, partitions=app.partitions,
                match=qp.get("match", ""), **data)  # fmt: skip


@guarded
async def rule(request: Request, st: Any) -> Response:
    q, qp = request.path_params["queue"], request.query_params
    sid = qp.get("id", "")
    data = await st.console.call("rule", q, sid)
    sim, sim_error = None, None
    if qp.get("from") and qp.get("to"):
        try:
            lo, hi = _instant(qp["from"], "from"), _instant(qp["to"], "to")
            slow = float(qp["slow"]) if qp.get("slow") else None
            sim = await st.console.call("simulate", q, sid, datetime_to_ms(lo, floor=True),
                                        datetime_to_ms(hi, floor=True), slow)  # fmt: skip
        except (ValueError, ZschedError) as exc:
            sim_error = redact_text(str(exc))
    return page(request, "rule.html", queue=q, sid=sid, sim=sim, sim_error=sim_error,
                sim_from=qp.get("from", ""), sim_to=qp.get("to", ""),
                sim_slow=qp.get("slow", ""), **data)  # fmt: skip


@guarded
async def rule_remove(request: Request, st: Any) -> Response:
    q, sid = request.path_params["queue"], request.query_params.get("id", "")
    await st.console.call("rule", q, sid)  # 404 for an unknown rule
    return page(request, "confirm_remove.html", queue=q, sid=sid)


@guarded
async def dead(request: Request, st: Any) -> Response:
    q, qp = request.path_params["queue"], request.query_params
    task, reason = qp.get("task", ""), qp.get("reason", "")
    data = await st.console.call("dead", q, qp.get("cursor", ""), task, reason)
    return page(request, "dead.html", queue=q, task=task, reason=reason, **data)


@guarded
async def dead_confirm(request: Request, st: Any) -> Response:
    """How many dead letters a bulk replay/purge of a filter would touch, before confirming."""
    q, qp = request.path_params["queue"], request.query_params
    op = qp.get("op", "")
    if op not in ("replay", "purge"):
        raise ValueError(f"op must be replay or purge, got {op!r}")
    task, reason = qp.get("task", ""), qp.get("reason", "")
    m = await st.console.call("dead_count", q, task, reason)
    return page(request, "confirm_dead.html", queue=q, op=op, task=task, reason=reason,
                count=len(m.entry_ids), complete=m.complete, scanned=m.scanned,
                scan_max=reads.DEAD_SCAN_MAX)  # fmt: skip
