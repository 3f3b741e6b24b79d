"""`from_beat_schedule`: a Celery app's `beat_schedule` as zsched rules, keyed by entry name.

`crontab` becomes cron, `schedule`/`timedelta`/numbers become `every`; args, kwargs and the
sending options are carried over. The zone is the Celery app's `timezone`, required: Celery's
silent UTC default is what put so many beat jobs an hour off twice a year. `solar` schedules
and custom schedule classes are refused, naming the entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from zsched.errors import RuleError
from zsched.integrations.celery.rules import celery_rule

if TYPE_CHECKING:
    from zsched.app import App

_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def _field(value: Any) -> str:
    if isinstance(value, str):
        return value.replace(" ", "")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in sorted(value))
    raise TypeError(f"cannot read crontab field {value!r}")


def crontab_to_cron(name: str, sched: Any) -> str:
    """The 5-field cron expression of a Celery crontab (its original spelling, so `*/10`
    stays a wildcard rule for DST; docs/policies.md)."""
    fields = [_field(getattr(sched, f"_orig_{f}")) for f in _FIELDS]
    if fields[2] != "*" and fields[4] != "*":
        # Celery fires only when both match; cron (and zsched) fire when either does.
        raise RuleError(
            f"beat_schedule entry {name!r}: crontab restricts both day_of_month and "
            "day_of_week; Celery requires both to match, cron either: split it into two rules"
        )
    return " ".join(fields)


def _trigger(name: str, sched: Any, tz: str) -> dict[str, Any]:
    from celery.schedules import crontab, schedule, solar

    if isinstance(sched, bool):
        raise RuleError(f"beat_schedule entry {name!r}: schedule {sched!r} is not a schedule")
    if isinstance(sched, timedelta):
        return {"every": sched}
    if isinstance(sched, int | float):
        return {"every": float(sched)}
    if isinstance(sched, solar):
        raise RuleError(
            f"beat_schedule entry {name!r}: solar schedules are not supported (zsched rules "
            "are cron or fixed intervals); compute the times yourself or keep it in Beat"
        )
    if type(sched) is crontab:
        return {"cron": crontab_to_cron(name, sched), "tz": tz}
    if type(sched) is schedule:
        return {"every": sched.run_every}
    raise RuleError(
        f"beat_schedule entry {name!r}: custom schedule class {type(sched).__qualname__} "
        "is not supported; express it as a crontab or an interval"
    )


def beat_entry_rule(
    name: str, entry: Mapping[str, Any], tz: str, **defaults: Any
) -> dict[str, Any]:
    """The rule options (for App.schedule/declare) of one beat_schedule entry."""
    if not isinstance(entry, Mapping) or "task" not in entry or "schedule" not in entry:
        raise RuleError(f"beat_schedule entry {name!r} needs 'task' and 'schedule'")
    unknown = set(entry) - {"task", "schedule", "args", "kwargs", "options", "relative"}
    if unknown:
        raise RuleError(
            f"beat_schedule entry {name!r}: unknown key(s) {', '.join(sorted(unknown))}"
        )
    args = entry.get("args") or ()
    if callable(args) or callable(entry.get("kwargs")):
        raise RuleError(f"beat_schedule entry {name!r}: lazy (callable) args are not supported")
    task, opts = celery_rule(
        name, entry["task"], celery_args=tuple(args), celery_kwargs=entry.get("kwargs"),
        celery_options=entry.get("options"), **{**defaults, **_trigger(name, entry["schedule"], tz)},
    )  # fmt: skip
    return {"task": task, **opts}


def from_beat_schedule(
    celery_app: Any, app: App | None = None, **defaults: Any
) -> dict[str, dict[str, Any]]:
    """Every entry of `celery_app.conf.beat_schedule` as a rule (schedule id = entry name):
    declared on `app` when given (written when a dispatcher starts, like any declared rule).
    `defaults`: rule options for every entry (misfire=, overlap=, misfire_grace= ...).
    Returns schedule id -> {"task": ..., **options}."""
    tz = celery_app.conf.timezone
    if not tz:
        raise RuleError(
            "the Celery app has no timezone set (app.conf.timezone): Celery would silently use "
            "UTC; set it (e.g. 'Europe/Berlin', or 'UTC' if you mean it) and call again"
        )
    rules = {
        name: beat_entry_rule(name, entry, str(tz), **defaults)
        for name, entry in (celery_app.conf.beat_schedule or {}).items()
    }
    if app is not None:
        for sid, r in rules.items():
            opts = dict(r)
            app.declare(sid, opts.pop("task"), **opts)
    return rules
