"""Recurring rules of the chaos run: one per misfire policy and one per overlap policy.

They need the recurring-rules work (`App.schedule`); without it RULES_AVAILABLE is False and
the run says so and checks delayed runs only. The rules fire every second or two; outages of
redis-server make slots late (the misfire policies), and handlers that outlast the interval
make fires overlap (the overlap policies).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import zsched

RULES_AVAILABLE = hasattr(zsched.App, "schedule")

#: (schedule id, interval s, misfire, overlap, handler work s, lease s)
RULES = [
    ("r-catch-up", 1.0, "catch_up", "allow", 0.0, None),
    ("r-coalesce", 1.0, "coalesce", "allow", 0.0, None),
    ("r-skip", 1.0, "skip", "allow", 0.0, None),
    ("r-overlap-skip", 1.0, "coalesce", "skip", 1.5, 4.0),
    ("r-overlap-queue", 2.0, "coalesce", "queue", 2.5, 5.0),
]
#: Outcomes each rule may record for a slot (fire ledger), by its policies.
ALLOWED = {
    "catch_up": {"ran", "ran_late"},
    "coalesce": {"ran", "ran_late", "coalesced"},
    "skip": {"ran", "skipped/grace_passed"},
}
LATE = {
    "catch_up": {"ran_late"},
    "coalesce": {"ran_late", "coalesced"},
    "skip": {"skipped/grace_passed"},
}


def rule_specs() -> list[dict[str, Any]]:
    return [
        {"id": sid, "every": every, "misfire": mis, "overlap": ovl, "work_s": work, "lease": lease}
        for sid, every, mis, ovl, work, lease in RULES
    ]


def create(app: zsched.App, start_s: float) -> None:
    """Schedule the rules with their first slot at `start_s` (a whole second)."""
    for spec in rule_specs():
        app.schedule(
            spec["id"],
            "tick",
            every=spec["every"],
            misfire=spec["misfire"],
            overlap=spec["overlap"],
            payload={"work_s": spec["work_s"]},
            lease=spec["lease"],
            start_at=start_s,
        )


def pause_all(app: zsched.App) -> None:
    for spec in rule_specs():
        app.pause_schedule(spec["id"])


def _kind(rec: dict[str, Any]) -> str:
    out, why = rec["outcome"], rec.get("reason", "")
    if out == "skipped":
        return "skipped/" + ("overlap" if why.startswith("overlap") else why)
    if out in ("ran", "ran_late") and why.startswith("queued behind"):
        return out + "/queued"
    return out


def check_rules(
    app: zsched.App, start_s: float, executed: set[str], end_ms: int
) -> tuple[list[str], list[list[str]]]:
    """Each rule's ledger against its policy. Returns (failures, table rows)."""
    failures: list[str] = []
    rows: list[list[str]] = []
    infos = {i.schedule_id: i for i in app.schedules()}
    for spec in rule_specs():
        sid, every_ms = spec["id"], int(spec["every"] * 1000)
        ledger = list(reversed(app.schedule_history(sid, count=100_000)))
        by_slot: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for rec in ledger:
            by_slot[rec["slot_ms"]].append(rec)
        first = int(start_s * 1000)
        last = max(by_slot, default=first - every_ms)
        want = list(range(first, last + 1, every_ms))
        bad = [s for s in want if len(by_slot.get(s, [])) != 1]
        if bad:
            failures.append(
                f"{sid}: {len(bad)} slots without exactly one ledger outcome, e.g. {bad[:3]}"
            )
        if set(by_slot) - set(want):
            failures.append(f"{sid}: ledger outcomes for slots off the rule's grid")
        if last < end_ms - 3 * every_ms:
            failures.append(f"{sid}: last recorded slot {last} is long before the end {end_ms}")
        kinds = Counter(_kind(recs[0]) for recs in by_slot.values())
        failures += _policy(spec, kinds, infos.get(sid), ledger, executed)
        rows.append(
            [
                sid,
                spec["misfire"],
                spec["overlap"],
                str(len(want)),
                " ".join(f"{k}={v}" for k, v in sorted(kinds.items())),
                str(infos[sid].missed if sid in infos else "?"),
            ]
        )
    return failures, rows


def _policy(
    spec: dict[str, Any],
    kinds: Counter[str],
    info: Any,
    ledger: list[dict[str, Any]],
    executed: set[str],
) -> list[str]:
    sid, mis, ovl = spec["id"], spec["misfire"], spec["overlap"]
    fails: list[str] = []
    allowed = set(ALLOWED[mis])
    if ovl == "skip":
        allowed.add("skipped/overlap")
    if ovl == "queue":
        allowed |= {"skipped/overlap", "ran/queued", "ran_late/queued"}
    odd = set(kinds) - allowed
    if odd:
        fails.append(f"{sid} ({mis}, overlap {ovl}): outcomes its policy forbids: {sorted(odd)}")
    # Every slot that ran (or was queued) must have been executed.
    must_run = {r["run_id"] for r in ledger if r["outcome"] in ("ran", "ran_late")}
    never = sorted(must_run - executed)
    if never:
        fails.append(f"{sid}: {len(never)} fired runs never executed, e.g. {never[:3]}")
    # A coalesced slot names the slot it went into: that one ran, or overlap dropped it.
    outcome_of = {r["run_id"]: _kind(r) for r in ledger}
    orphans = sorted(
        {
            r["run_id"]
            for r in ledger
            if r["outcome"] == "coalesced"
            and outcome_of.get(r["run_id"], "").split("/")[0] not in ("ran", "ran_late", "skipped")
        }
    )
    if orphans:
        fails.append(f"{sid}: slots coalesced into a slot that never fired: {orphans[:3]}")
    late = sum(
        v
        for k, v in kinds.items()
        if k.split("/")[0] in ("ran_late", "coalesced") or k == "skipped/grace_passed"
    )
    if mis == "catch_up":
        late = kinds["ran_late"] + kinds["ran_late/queued"]
    # A late fire can still be dropped by the overlap policy: then it reads skipped/overlap.
    slack = 0 if ovl == "allow" else kinds["skipped/overlap"]
    if info is not None and not late <= info.missed <= late + slack:
        fails.append(
            f"{sid}: state counts {info.missed} missed slots, ledger shows {late} late"
            f" (+ up to {slack} dropped by overlap)"
        )
    if ovl != "allow" and not (kinds["skipped/overlap"] or kinds["ran/queued"]):
        fails.append(f"{sid}: overlap policy {ovl} was never exercised")
    return fails


def first_slot(now_s: float) -> float:
    """A whole second at least two seconds ahead: the rules' first slot."""
    return float(math.ceil(now_s) + 2)
