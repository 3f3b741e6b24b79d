"""Plain words for what the console shows: ledger outcomes, times, durations."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from zsched.clock import ms_to_datetime

_SKIPPED = {
    "grace_passed": "skipped: it was later than the rule's misfire grace (misfire policy)",
    "paused": "skipped: the rule was paused",
    "catch_up_cap": "skipped: more missed slots than max_catch_up replays",
    "dst_gap": "skipped: the wall time fell in a DST gap (dst_gap=skip)",
}


def _skipped(reason: str) -> str:
    if reason.startswith("overlap: "):
        holder = reason[len("overlap: ") :].removesuffix(" still running")
        return f"skipped: the previous run {holder} was still running (overlap=skip)"
    if reason.startswith(("paused: ", "paused by ")):  # pause_schedule(note=..., by=...)
        head, _, note = reason.partition(": ")  # `by` never holds ':'
        by = head[len("paused by ") :] if head.startswith("paused by ") else ""
        return (
            "skipped: the rule was paused"
            + (f" by {by}" if by else "")
            + (f" ({note})" if note else "")
        )
    return _SKIPPED.get(reason, f"skipped: {reason}")


def why(outcome: str, reason: str, run_id: str) -> str:
    """A ledger row in words: what happened to the slot, and why."""
    if outcome == "skipped":
        return _skipped(reason)
    if reason.startswith("queued behind "):
        return f"queued: waits for {reason[len('queued behind ') :]} to finish (overlap=queue)"
    if outcome == "coalesced":
        return f"coalesced {reason}" if reason else "coalesced into a later slot's run"
    if outcome == "ran":
        return f"ran on time as {run_id}"
    if outcome == "ran_late":
        return f"ran late as {run_id} (a catch-up replay or a coalesced run)"
    if outcome == "duplicate":
        return f"not fired again: run {run_id} was already live or recently done"
    if outcome == "manual":
        return f"run now by hand as {run_id}"
    if outcome == "backfilled":
        return f"backfilled by hand as {run_id}"
    return f"{outcome}: {reason}" if reason else outcome


def iso_utc(ms: int | None) -> str:
    """An instant as ISO-8601 UTC with seconds ('' for None)."""
    if ms is None:
        return ""
    return ms_to_datetime(ms).strftime("%Y-%m-%dT%H:%M:%SZ")


def in_zone(ms: int | None, tz: str | None) -> str:
    """An instant on the wall clock of `tz`, with its offset ('' for None or no zone)."""
    if ms is None or not tz:
        return ""
    local = ms_to_datetime(ms).astimezone(ZoneInfo(tz))
    return local.strftime("%Y-%m-%d %H:%M:%S %z ") + tz


def age(ms: int | None) -> str:
    """A duration in ms, short ('-' for None)."""
    if ms is None:
        return "-"
    s = ms / 1000
    if s < 120:
        return f"{s:.1f}s"
    if s < 7200:
        return f"{s / 60:.0f}min"
    return f"{s / 3600:.1f}h"


# -- what the run controls did (the public API's outcomes, in words) ------------------------------

_CANCEL = {
    "cancelled_delayed": "cancelled run {id}: it was waiting for its time and will not run",
    "cancelled_ready": "cancelled run {id}: it was on the ready stream, and no worker had read it",
    "requested": "asked the worker running {id} to stop: it ends cancelled when its handler stops",
    "not_found": "no run {id}: never enqueued, or its records are gone",
    "done": "run {id} has finished already: nothing to cancel",
    "already_cancelled": "run {id} was cancelled already",
}
_RESCHEDULE = {
    "not_found": "no delayed run {id}: never enqueued, cancelled, or gone",
    "ready": "run {id} was not moved: it is on the ready stream already",
    "running": "run {id} was not moved: a worker is running it",
    "done": "run {id} was not moved: it has finished",
    "dead": "run {id} was not moved: it is a dead letter (replay it instead)",
}
_RUN_NOW = {
    "started": "rule {id} fired now as {run}",
    "skipped": "rule {id} was not fired: its previous run still holds the lease (overlap=skip; "
    "tick force to start anyway)",
    "queued": "rule {id}: {run} waits for the rule's running run to finish (overlap=queue)",
    "duplicate": "rule {id}: {run} exists already (fired twice in the same instant)",
}


def cancelled(outcome: str, run_id: str) -> str:
    """A CancelResult's outcome (its lower-case name) in words."""
    return _CANCEL.get(outcome, "cancel of {id}: " + outcome).format(id=run_id)


def rescheduled(outcome: str, run_id: str, due_ms: int | None) -> str:
    """A RescheduleResult in words."""
    if outcome == "moved":
        return f"run {run_id} now waits until {iso_utc(due_ms)}"
    return _RESCHEDULE.get(outcome, "reschedule of {id}: " + outcome).format(id=run_id)


def fired_now(outcome: str, schedule_id: str, run_id: str) -> str:
    """A ManualFire in words."""
    return _RUN_NOW.get(outcome, "{id}: " + outcome).format(id=schedule_id, run=run_id)


def paused_line(paused_ms: int | None, note: str | None) -> str:
    """'paused since <UTC>: <note>' ('' when not paused)."""
    if paused_ms is None:
        return ""
    return f"paused since {iso_utc(paused_ms)}" + (f": {note}" if note else "")
