"""Rules whose fires are Celery tasks: the payload the bridge reads, and how a rule is built.

No Celery import here: `App.schedule(..., celery_task=...)` works where only the dispatcher
runs. A Celery fire is an ordinary zsched run of the task `BRIDGE_TASK`; its payload names the
Celery task, its arguments and its sending options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zsched.errors import RuleError
from zsched.rules.policies import Overlap
from zsched.rules.spec import build_spec

#: The zsched task name of every Celery fire; only the bridge registers it.
BRIDGE_TASK = "zsched.celery.send"
#: Celery's sending options a rule may carry (the rest of apply_async's are refused: a typo
#: in an option would otherwise be dropped silently).
OPTIONS = ("queue", "routing_key", "exchange", "priority", "expires", "headers")
#: How long the bridge waits for a fire's task to finish when the rule's overlap policy needs
#: to know (skip, queue) and no wait was given: one hour.
DEFAULT_WAIT_S = 3600.0


@dataclass(frozen=True)
class CeleryFire:
    """What the bridge sends for one fire (decoded from the run's payload)."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    #: The rule's misfire grace (ms): the default `expires` is the slot plus this.
    grace_ms: int | None
    #: Seconds the bridge waits for the task to finish (0: it does not wait).
    wait_s: float


def check_options(options: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """Celery sending options, validated; RuleError names `where` and the bad option."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise RuleError(
            f"{where}: unsupported Celery option(s) {', '.join(unknown)}; "
            f"supported: {', '.join(OPTIONS)}"
        )
    exp = opts.get("expires", None)
    if exp is not None and (
        isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp)
    ):
        raise RuleError(f"{where}: expires must be seconds or None, got {exp!r}")
    pri = opts.get("priority")
    if pri is not None and (isinstance(pri, bool) or not isinstance(pri, int) or pri < 0):
        raise RuleError(f"{where}: priority must be an integer >= 0, got {pri!r}")
    headers = opts.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise RuleError(f"{where}: headers must be a mapping, got {headers!r}")
    for name in ("queue", "routing_key", "exchange"):
        if opts.get(name) is not None and not isinstance(opts[name], str):
            raise RuleError(f"{where}: {name} must be a string, got {opts[name]!r}")
    return opts


def fire_payload(
    celery_task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    grace_ms: int | None = None,
    wait_s: float = 0.0,
    where: str = "celery fire",
) -> dict[str, Any]:
    """The payload of a Celery fire (msgpack-encodable: args and kwargs must be plain data)."""
    if not isinstance(celery_task, str) or not celery_task:
        raise RuleError(f"{where}: celery_task must be a task name, got {celery_task!r}")
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise RuleError(f"{where}: celery args must be a list or tuple, got {args!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise RuleError(f"{where}: celery kwargs must be a mapping, got {kwargs!r}")
    return {
        "celery_task": celery_task,
        "args": list(args),
        "kwargs": dict(kwargs or {}),
        "options": check_options(options, where),
        "grace_ms": grace_ms,
        "wait_s": float(wait_s),
    }


def decode_fire(payload: Any) -> CeleryFire:
    """The fire a payload describes; ValueError names what is malformed."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("celery_task"), str):
        raise ValueError(f"not a Celery fire payload: {payload!r}"[:300])
    args, kwargs = payload.get("args") or [], payload.get("kwargs") or {}
    options, wait = payload.get("options") or {}, payload.get("wait_s") or 0
    if not isinstance(args, list) or not isinstance(kwargs, Mapping):
        raise ValueError("Celery fire payload: args must be a list and kwargs a map")
    if not isinstance(options, Mapping) or not isinstance(wait, int | float):
        raise ValueError("Celery fire payload: options must be a map and wait_s a number")
    grace = payload.get("grace_ms")
    return CeleryFire(
        payload["celery_task"], args, dict(kwargs), check_options(options, "Celery fire"),
        grace if isinstance(grace, int) else None, float(wait),
    )  # fmt: skip


def celery_rule(
    schedule_id: str,
    celery_task: str,
    *,
    celery_args: Sequence[Any] = (),
    celery_kwargs: Mapping[str, Any] | None = None,
    celery_options: Mapping[str, Any] | None = None,
    celery_wait: float | None = None,
    **rule: Any,
) -> tuple[str, dict[str, Any]]:
    """(task name, options) of a zsched rule that sends `celery_task` at each slot:
    `task, opts = celery_rule(sid, ...); app.schedule(sid, task, **opts)` is the same as
    `app.schedule(sid, celery_task=..., ...)` (and works with any API that takes a task name
    and rule options). `rule`: cron=/every=/tz=/misfire=/overlap=... as for any rule.

    `celery_wait`: with overlap skip or queue, how long (s) the bridge waits for the task to
    finish before it frees the rule's lease anyway (default one hour); it needs the worker
    hook (`install_overlap_hook`)."""
    where = f"schedule {schedule_id}"
    if "payload" in rule:
        raise RuleError(f"{where}: a Celery rule takes celery_args/celery_kwargs, not payload")
    spec = build_spec(schedule_id, BRIDGE_TASK, **rule)  # validates the rule, gives the grace
    waits = spec.overlap is not Overlap.ALLOW
    wait = (DEFAULT_WAIT_S if celery_wait is None else celery_wait) if waits else 0.0
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait >= 0:
        raise RuleError(f"{where}: celery_wait must be seconds >= 0, got {celery_wait!r}")
    payload = fire_payload(
        celery_task, celery_args, celery_kwargs, celery_options,
        grace_ms=spec.misfire_grace_ms, wait_s=wait, where=where,
    )  # fmt: skip
    return BRIDGE_TASK, {**rule, "payload": payload}
