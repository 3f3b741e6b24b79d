"""`zsched schedules ...`: recurring rules — list, add, edit, pause, resume, rm, backfill,
next, history, audit, simulate."""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any
from zoneinfo import ZoneInfo

import zsched
from zsched.cli.common import UsageError, add_connection, add_json, emit, make_app
from zsched.cli.enqueue import parse_at, parse_seconds
from zsched.clock import datetime_to_ms, ms_to_datetime, server_now_ms

ACTIONS = ("list", "add", "edit", "pause", "resume", "rm", "backfill", "next", "history",
           "audit", "simulate", "run")  # fmt: skip


def _iso(ms: int | None, tz: str = "UTC") -> str:
    if ms is None:
        return "-"
    return ms_to_datetime(ms).astimezone(ZoneInfo(tz)).isoformat(timespec="seconds")


def _os_user() -> str | None:
    """Who runs the CLI, as the OS says (None when it cannot say)."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):  # no USER/LOGNAME and no passwd entry (a bare container)
        return None


def _rule_options(p: argparse.ArgumentParser, required: bool) -> None:
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--cron", metavar="EXPR",
                   help="cron expression (5 fields, or 6 with seconds first)")  # fmt: skip
    g.add_argument("--every", metavar="SECONDS", help="fixed interval in seconds")
    p.add_argument("--tz", metavar="ZONE",
                   help="IANA time zone, required with --cron (e.g. Europe/Berlin)")  # fmt: skip
    p.add_argument("--payload", metavar="JSON", help="payload of every run, as JSON")
    p.add_argument("--misfire", choices=["catch_up", "coalesce", "skip"])
    p.add_argument("--misfire-grace", metavar="SECONDS", help="a slot later than this is missed")
    p.add_argument("--overlap", choices=["allow", "skip", "queue"])
    p.add_argument("--max-catch-up", type=int, metavar="N",
                   help="slots replayed at most (catch_up)")  # fmt: skip
    p.add_argument("--jitter", metavar="SECONDS", help="spread each fire by up to this much")
    p.add_argument("--start", metavar="ISO", help="no slot before this instant")
    p.add_argument("--end", metavar="ISO", help="no slot after this instant")
    p.add_argument("--dst-gap", choices=["shift", "skip"], help="local times in a DST gap")
    p.add_argument("--dst-repeat", choices=["first", "both"], help="local times that repeat")


def register(sub: Any) -> None:
    p = sub.add_parser("schedules", help="recurring rules (cron or interval)",
                       description="Recurring rules of a queue.")  # fmt: skip
    ss = p.add_subparsers(dest="schedules_command", metavar="ACTION", required=True)

    def action(name: str, help_: str, fn: Any, with_id: bool = True) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = ss.add_parser(name, help=help_, description=help_)
        if with_id:
            a.add_argument("schedule_id", metavar="ID")
        add_connection(a)
        add_json(a)
        a.set_defaults(func=fn)
        return a

    action("list", "every rule with next and last fire, last outcome, missed count", cmd_list,
           with_id=False)  # fmt: skip
    a = action("add", "create a rule (or replace one with the same id)", cmd_add)
    a.add_argument("task", help="registered task name")
    _rule_options(a, required=True)
    a.add_argument("--paused", action="store_true", help="create it paused")
    e = action("edit", "change some options of a rule; its next fire is recomputed", cmd_edit)
    e.add_argument("--task", help="another task name")
    _rule_options(e, required=False)
    pz = action("pause", "stop firing (slots until resume are recorded as skipped)", cmd_pause)
    pz.add_argument("--note", default=None, help="why (kept with the pause time, shown by list "
                    "and in the ledger's skipped entries)")  # fmt: skip
    pz.add_argument("--by", default=None, help="who pauses (default: the OS user; '' for none)")
    rn = action("run", "fire the rule once now (run id ID@manual:<instant>; slots unchanged)",
                cmd_run)  # fmt: skip
    rn.add_argument("--force", action="store_true",
                    help="start it even while a run holds the rule's overlap lease")  # fmt: skip
    action("resume", "fire again from now on", cmd_resume)
    action("rm", "remove a rule, its state and ledger", cmd_rm)
    b = action("backfill", "enqueue the slots of a past range (re-running adds nothing)",
               cmd_backfill)  # fmt: skip
    b.add_argument("--from", dest="start", required=True, metavar="ISO")
    b.add_argument("--to", dest="end", required=True, metavar="ISO")
    n = action("next", "the coming fire times, in the rule's zone and in UTC", cmd_next)
    n.add_argument("--count", type=int, default=5, metavar="N")
    h = action("history", "the fire ledger: one outcome per slot, newest first", cmd_history)
    h.add_argument("--count", type=int, default=50, metavar="N")
    action("audit", "find slots that have no recorded outcome (exit 1 if any)", cmd_audit,
           with_id=False)  # fmt: skip
    s = action("simulate", "dry run: what the policies would do over an outage", cmd_simulate)
    s.add_argument("--down", required=True, metavar="FROM..TO",
                   help="dispatcher outage, two ISO instants joined by '..'")  # fmt: skip
    s.add_argument("--slow-runs", metavar="SECONDS", help="each run takes this long")
    s.add_argument("--as-resumed", action="store_true",
                   help="a paused rule: what its policies would do, resumed before FROM")  # fmt: skip


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The rule options the command line gave (a trigger's rivals set to None)."""
    o = _trigger(args)
    if args.payload is not None:
        try:
            o["payload"] = json.loads(args.payload)
        except ValueError as exc:
            raise UsageError(f"--payload is not valid JSON: {exc}") from None
    for name in ("misfire", "overlap", "max_catch_up", "dst_gap", "dst_repeat"):
        if getattr(args, name) is not None:
            o[name] = getattr(args, name)
    for name, flag in (("misfire_grace", "--misfire-grace"), ("jitter", "--jitter")):
        if getattr(args, name) is not None:
            o[name] = parse_seconds(getattr(args, name), flag)
    if args.start is not None:
        o["start_at"] = parse_at(args.start)
    if args.end is not None:
        o["end_at"] = parse_at(args.end)
    return o


def _trigger(args: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {}
    if args.cron is not None:
        o["cron"], o["every"] = args.cron, None
    if args.every is not None:
        o["every"], o["cron"], o["tz"] = parse_seconds(args.every, "--every"), None, None
    if args.tz is not None:
        o["tz"] = args.tz
    return o


def _result(code: int) -> str:
    return {1: "created", 2: "updated", 0: "unchanged"}[code]


def cmd_add(args: argparse.Namespace) -> int:
    o = {k: v for k, v in _options(args).items() if v is not None}
    code = make_app(args).schedule(args.schedule_id, args.task, paused=args.paused, **o)
    emit(args, {"schedule_id": args.schedule_id, "result": _result(code)}, _result(code))
    return 0


def cmd_edit(args: argparse.Namespace) -> int:
    from zsched.rules.ops import load
    from zsched.rules.spec import spec_options

    app = make_app(args)
    spec = load(app.rule_home(args.schedule_id).ctx, args.schedule_id)[0]
    o = spec_options(spec)
    new = _options(args)
    if "every" in new and new["every"] is not None:
        for k in ("cron", "tz", "dst_gap", "dst_repeat"):
            o.pop(k, None)
    if "cron" in new and new["cron"] is not None:
        o.pop("every", None)
    o.update({k: v for k, v in new.items() if v is not None})
    code = app.schedule(args.schedule_id, args.task or spec.task, **o)
    emit(args, {"schedule_id": args.schedule_id, "result": _result(code)}, _result(code))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    infos = make_app(args).schedules()
    lines = [f"{'ID':<20} {'RULE':<34} {'NEXT (UTC)':<26} {'LAST OUTCOME':<13} MISSED"]
    for i in infos:
        nxt = "paused" if i.paused else _iso(i.next_fire_ms)
        lines.append(f"{i.schedule_id:<20} {i.rule:<34} {nxt:<26} {i.last_outcome or '-':<13} "
                     f"{i.missed}")  # fmt: skip
        if i.paused and (i.paused_ms is not None or i.pause_note or i.paused_by):
            since = f" since {_iso(i.paused_ms)}" if i.paused_ms is not None else ""
            by = f" by {i.paused_by}" if i.paused_by else ""
            lines.append(f"{'':<20} paused{since}{by}: {i.pause_note or '(no note)'}")
        if i.unreadable:
            lines.append(f"{'':<20} UNREADABLE, does not fire until rewritten: {i.unreadable}")
    emit(args, [i.as_dict() for i in infos], "\n".join(lines) if infos else "no schedules")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    res = make_app(args).run_schedule_now(args.schedule_id, force=args.force)
    emit(args, res.as_dict(), f"{res.outcome.value}: {res.run_id}")
    return 0 if res.started or res.outcome.value == "queued" else 1


def cmd_pause(args: argparse.Namespace) -> int:
    by = _os_user() if args.by is None else args.by or None
    ok = make_app(args).pause_schedule(args.schedule_id, note=args.note, by=by)
    text = "paused" if ok else "already paused"
    emit(args, {"schedule_id": args.schedule_id, "paused": ok, "by": by}, text)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    ok = make_app(args).resume_schedule(args.schedule_id)
    emit(args, {"schedule_id": args.schedule_id, "resumed": ok}, "resumed" if ok else "not paused")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    ok = make_app(args).unschedule(args.schedule_id)
    text = "removed" if ok else "no such rule"
    emit(args, {"schedule_id": args.schedule_id, "removed": ok}, text)
    return 0 if ok else 1


def cmd_backfill(args: argparse.Namespace) -> int:
    n = make_app(args).backfill(args.schedule_id, parse_at(args.start), parse_at(args.end))
    emit(args, {"schedule_id": args.schedule_id, "enqueued": n}, f"enqueued {n} runs")
    return 0


def cmd_next(args: argparse.Namespace) -> int:
    from zsched.rules.ops import load

    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    home = make_app(args).rule_home(args.schedule_id).ctx
    spec = load(home, args.schedule_id)[0]
    tz = getattr(spec.trigger, "tz", "UTC")
    slots: list[int] = []
    at = server_now_ms(home.clock, home.redis)
    while len(slots) < args.count:
        nxt = spec.first_slot_after(at)
        if nxt is None:
            break
        slots.append(nxt)
        at = nxt
    rows = [{"local": _iso(s, tz), "utc": _iso(s), "run_id": zsched.rules.triggers.slot_run_id(
        args.schedule_id, s)} for s in slots]  # fmt: skip
    text = "\n".join(f"{r['local']}  ({r['utc']} UTC)" for r in rows)
    emit(args, rows, text or "no more fires")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    rows = make_app(args).schedule_history(args.schedule_id, args.count)
    lines = [f"{_slots(r)}  {r['outcome']:<10} {r['reason']}" for r in rows]
    emit(args, rows, "\n".join(lines) or "no history")
    return 0


def _slots(row: dict[str, Any]) -> str:
    """A history row's slot, or its range of slots (a long pause: one entry for all)."""
    one = _iso(row["slot_ms"])
    return one if row["last_ms"] == row["slot_ms"] else f"{one} .. {_iso(row['last_ms'])}"


def cmd_audit(args: argparse.Namespace) -> int:
    results = make_app(args).audit_schedules()
    lines = []
    for r in results:
        state = "ok" if not r.unaccounted else f"{len(r.unaccounted)} slot(s) without an outcome"
        if r.unreadable:
            state = f"UNREADABLE, not audited: {r.unreadable}"
        lines.append(f"{r.schedule_id:<20} checked {r.checked:<6} {state}")
        lines += [f"    missing {_iso(s)}" for s in r.unaccounted[:20]]
    emit(args, [r.as_dict() for r in results], "\n".join(lines) or "no schedules")
    return 1 if any(r.unaccounted or r.unreadable for r in results) else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from zsched.dispatch.simulate import simulate

    if ".." not in args.down:
        raise UsageError(f"--down {args.down!r}: expected FROM..TO (two ISO instants)")
    a, b = args.down.split("..", 1)
    start, end = parse_at(a), parse_at(b)
    if end < start:
        raise UsageError(f"--down {args.down!r}: TO is before FROM")
    slow = parse_seconds(args.slow_runs, "--slow-runs") if args.slow_runs else None
    app = make_app(args)
    from zsched.rules.ops import load

    home = app.rule_home(args.schedule_id).ctx
    spec, state, *_ = load(home, args.schedule_id)
    tz = getattr(spec.trigger, "tz", "UTC")
    rows = simulate(home, args.schedule_id, datetime_to_ms(start, floor=True),
                    datetime_to_ms(end, floor=True), slow, as_resumed=args.as_resumed)  # fmt: skip
    lines = [f"{_iso(r.slot_ms, tz)}  {r.outcome:<10} {r.reason}" for r in rows]
    if spec.paused:
        lines.insert(0, _paused_header(args.schedule_id, state, tz, args.as_resumed))
    emit(args, [r.as_dict() for r in rows], "\n".join(lines) or "no slots")
    return 0


def _paused_header(sid: str, state: Any, tz: str, as_resumed: bool) -> str:
    """The first line of a paused rule's simulation: what the rows below assume."""
    from zsched.rules.ops import paused_reason

    since = f" since {_iso(state.paused_ms, tz)}" if state.paused_ms is not None else ""
    head = f"{sid} is paused{since} ({paused_reason(state.pause_note, state.paused_by)})"
    if as_resumed:
        return f"{head}: below, what its policies would do had it been resumed before FROM"
    return (f"{head}: it fires nothing while paused, so each slot below is recorded "
            "`skipped: paused` when it is resumed; --as-resumed shows what its policies "
            "would do had it been resumed before FROM")  # fmt: skip
