"""Actions: POST forms, each one call of the public API through the backend.

An action is a name, the backend method it calls, how it reads its arguments from the form and
which page it returns to. `ACTIONS` lists them; one route serves them all and exists only when
the console may act, so a read-only console has no action endpoint at all. Adding an action is
one `Action` and one backend method (the run controls are in run_controls.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from zsched.errors import ZschedError
from zsched.store.connection import redact_text
from zsched.web.auth import CSRF_FIELD, csrf_ok, principal
from zsched.web.pages import _error, _instant, challenge
from zsched.web.render import href, redirect

#: Most dead letters one selection may name.
MAX_SELECTED = 500


@dataclass(frozen=True)
class Action:
    """One action: `method` of the backend, called with (queue, *parse(form))."""

    name: str
    method: str
    parse: Callable[[FormData], tuple[Any, ...]]
    back: Callable[[Request, str, FormData], str]
    #: The method also takes who acted (the principal of the request's credentials).
    by: bool = False


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"the form has no {name}")
    return value


def _run_id(form: FormData) -> tuple[Any, ...]:
    return (_field(form, "run_id"),)


def _rule_id(form: FormData) -> tuple[Any, ...]:
    return (_field(form, "schedule_id"),)


def _remove(form: FormData) -> tuple[Any, ...]:
    sid = _field(form, "schedule_id")
    if form.get("confirm") != sid:
        raise ValueError(f"removing rule {sid} needs its confirmation form")
    return (sid,)


def _float(form: FormData, name: str) -> float | None:
    raw = form.get(name)
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None


def _edit(form: FormData) -> tuple[Any, ...]:
    """The edited fields: trigger (cron + tz, or every) and policies."""
    sid = _field(form, "schedule_id")
    changes: dict[str, Any] = {}
    kind = form.get("kind")
    if kind == "cron":
        changes["cron"] = _field(form, "cron")
        changes["tz"] = form.get("tz") or None
    elif kind == "every":
        changes["every"] = _float(form, "every")
    elif kind is not None:
        raise ValueError(f"trigger kind must be cron or every, got {kind!r}")
    for name in ("misfire", "overlap"):
        if form.get(name):
            changes[name] = form.get(name)
    for name in ("misfire_grace", "jitter", "lease"):
        value = _float(form, name)
        if value is not None:
            changes[name] = value
    if form.get("max_catch_up"):
        try:
            changes["max_catch_up"] = int(str(form.get("max_catch_up")))
        except ValueError:
            raise ValueError("max_catch_up must be a whole number") from None
    return sid, changes


def _backfill(form: FormData) -> tuple[Any, ...]:
    sid = _field(form, "schedule_id")
    return sid, _instant(_field(form, "start"), "start"), _instant(_field(form, "end"), "end")


def _selected(form: FormData) -> tuple[Any, ...]:
    """A row's own button (`one`) acts on that letter only; else the checked boxes."""
    one = form.get("one")
    if isinstance(one, str) and one:
        return ([one],)
    ids = [v for v in form.getlist("entry_id") if isinstance(v, str) and v]
    if not ids:
        raise ValueError("select at least one dead letter")
    if len(ids) > MAX_SELECTED:
        raise ValueError(f"select at most {MAX_SELECTED} dead letters at once")
    return (ids,)


def _matching(form: FormData) -> tuple[Any, ...]:
    return str(form.get("task") or ""), str(form.get("reason") or "")


def _pause(form: FormData) -> tuple[Any, ...]:
    return _field(form, "schedule_id"), str(form.get("note") or "")


def _reschedule(form: FormData) -> tuple[Any, ...]:
    """A new due time (`at`, ISO-8601, UTC without an offset) or a delay (`in`, seconds)."""
    rid = _field(form, "run_id")
    at = form.get("at")
    when = _instant(at, "new due time") if isinstance(at, str) and at.strip() else None
    return rid, when, _float(form, "in")


def _run_now(form: FormData) -> tuple[Any, ...]:
    return _field(form, "schedule_id"), form.get("force") in ("1", "on", "true")


def _queue_note(form: FormData) -> tuple[Any, ...]:
    return (str(form.get("note") or ""),)


def _nothing(form: FormData) -> tuple[Any, ...]:
    return ()


def _to_run(request: Request, q: str, form: FormData) -> str:
    return href(request, "q", q, "run", id=form.get("run_id"))


def _to_overview(request: Request, q: str, form: FormData) -> str:
    return href(request, "")


def _to_rule(request: Request, q: str, form: FormData) -> str:
    return href(request, "q", q, "rule", id=form.get("schedule_id"))


def _to_rules(request: Request, q: str, form: FormData) -> str:
    return href(request, "q", q, "rules")


def _to_dead(request: Request, q: str, form: FormData) -> str:
    return href(request, "q", q, "dead", task=form.get("task"), reason=form.get("reason"))


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("cancel", "cancel", _run_id, _to_run),
        Action("reschedule", "reschedule", _reschedule, _to_run),
        Action("run-now", "run_now", _run_now, _to_rule),
        Action("pause", "pause", _pause, _to_rule, by=True),
        Action("resume", "resume", _rule_id, _to_rule),
        Action("edit", "edit", _edit, _to_rule),
        Action("backfill", "backfill", _backfill, _to_rule),
        Action("remove", "remove", _remove, _to_rules),
        Action("replay", "replay", _selected, _to_dead),
        Action("purge", "purge", _selected, _to_dead),
        Action("replay-matching", "replay_matching", _matching, _to_dead),
        Action("purge-matching", "purge_matching", _matching, _to_dead),
        Action("pause-queue", "pause_queue", _queue_note, _to_overview),
        Action("resume-queue", "resume_queue", _nothing, _to_overview),
    )
}


async def act(request: Request) -> Response:
    """POST /q/{queue}/act/{name}: credentials, CSRF, then the action; back with a message."""
    st = request.app.state.console
    who = principal(request, st.creds, int(time.time()))
    if who is None:
        return challenge(request, st)
    form = await request.form()
    token = form.get(CSRF_FIELD)
    if not csrf_ok(request, token if isinstance(token, str) else ""):
        return _error(request, 403, "the form's CSRF token is missing or stale: reload the page")
    action = ACTIONS.get(request.path_params["name"])
    q = request.path_params["queue"]
    if action is None or q not in st.queues:
        return _error(request, 404, "no such action or queue")
    back = action.back(request, q, form)
    try:
        args = action.parse(form) + ((who,) if action.by else ())
        message = await st.console.call(action.method, q, *args)
    except (ZschedError, ValueError, LookupError) as exc:
        return redirect(request, back, ("error", redact_text(str(exc))))
    return redirect(request, back, ("ok", message))
