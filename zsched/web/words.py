"""Plain words for what the console shows: ledger outcomes, times, durations."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_SKIPPED = {
    "grace_passed": "skipped: it was later than the rule's misfire grace (misfire policy)",
    "paused": "skipped: the rule was paused",
    "catch_up_cap": "skipped: more missed slots than max_catch_up replays",
    "dst_gap": "skipped: the wall time fell in a DST gap (dst_gap=skip)",
}


def why(outcome: str, reason: str, run_id: str) -> str:
    """A ledger row in words: what happened to the slot, and why."""
    if outcome == "skipped":
        if reason.startswith("overlap: "):
            holder = reason[len("overlap: ") :].removesuffix(" still running")
            return f"skipped: the previous run {holder} was still running (overlap=skip)"
        return _SKIPPED.get(reason, f"skipped: {reason}")
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
    if outcome == "backfilled":
        return f"backfilled by hand as {run_id}"
    return f"{outcome}: {reason}" if reason else outcome


def iso_utc(ms: int | None) -> str:
    """An instant as ISO-8601 UTC with seconds ('' for None)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def in_zone(ms: int | None, tz: str | None) -> str:
    """An instant on the wall clock of `tz`, with its offset ('' for None or no zone)."""
    if ms is None or not tz:
        return ""
    local = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(ZoneInfo(tz))
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
