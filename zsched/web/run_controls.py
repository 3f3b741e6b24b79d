"""The console's run controls: reschedule a run, run a rule now, pause a rule with a note,
pause and resume a queue. Each is one call of the public App API (issue #20's controls), with
its outcome in words; `SyncBackend` takes them in as a mixin."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import zsched.web.words as words
from zsched.dispatch import heartbeat
from zsched.runs.runinput import check_pause_note


def checked_note(note: str | None) -> str | None:
    """A pause note stripped (None when empty); InvalidArgument (a ValueError) over
    MAX_PAUSE_NOTE_BYTES, pause_queue's bound (a rule's note is held to it too)."""
    note = (note or "").strip() or None
    check_pause_note(note)
    return note


class RunControls:
    """Actions over `self.app(queue)` (an App); the reads the controls need on pages."""

    def app(self, queue: str) -> Any:  # pragma: no cover - SyncBackend's
        raise NotImplementedError

    def cancel(self, queue: str, run_id: str) -> str:
        res = self.app(queue).cancel(run_id)
        return words.cancelled(res.outcome.name.lower(), run_id)

    def reschedule(
        self, queue: str, run_id: str, at: datetime | None, delay_s: float | None
    ) -> str:
        """Move a delayed run to `at`, or `delay_s` seconds from now (Redis clock)."""
        if (at is None) == (delay_s is None):
            raise ValueError("give a new due time, or a delay in seconds (one of them)")
        if at is not None:
            res = self.app(queue).reschedule(run_id, run_at=at)
        else:
            res = self.app(queue).reschedule(run_id, delay=delay_s)
        return words.rescheduled(res.outcome.name.lower(), run_id, res.due_ms)

    def run_now(self, queue: str, schedule_id: str, force: bool) -> str:
        fire = self.app(queue).run_schedule_now(schedule_id, force=force)
        return words.fired_now(fire.outcome.value, schedule_id, fire.run_id)

    def pause(
        self, queue: str, schedule_id: str, note: str | None = None, by: str | None = None
    ) -> str:
        ok = self.app(queue).pause_schedule(schedule_id, note=checked_note(note), by=by)
        return f"paused rule {schedule_id}" if ok else f"rule {schedule_id} was already paused"

    def pause_queue(self, queue: str, note: str | None) -> str:
        ok = self.app(queue).pause_queue(checked_note(note))
        return (f"paused queue {queue}: no run is dispatched until it resumes" if ok
                else f"queue {queue} was already paused")  # fmt: skip

    def resume_queue(self, queue: str) -> str:
        ok = self.app(queue).resume_queue()
        return f"resumed queue {queue}" if ok else f"queue {queue} was not paused"

    # -- reads --------------------------------------------------------------------------------

    def pauses(self) -> dict[str, str]:
        """{queue: 'paused since …: note'} of every paused queue served (one HMGET per
        partition, pipelined per queue): every page shows them."""
        out: dict[str, str] = {}
        apps: dict[str, Any] = getattr(self, "apps", {})
        for q, app in apps.items():
            views = app.partition_views()
            pipe = app.redis.pipeline(transaction=False)
            for v in views:
                pipe.hmget(v.keys.control, "paused_ms", "pause_note")
            for paused_ms, note in pipe.execute():
                if paused_ms is not None:
                    text = note.decode() if isinstance(note, bytes) else note
                    out[q] = words.paused_line(int(paused_ms), text)
                    break
        return out

    @staticmethod
    def dispatchers(view: Any, now_ms: int) -> list[dict[str, Any]]:
        """The dispatchers seen beating on a partition, with their heartbeat age."""
        return [{"name": n, "age_ms": max(0, now_ms - ms)}
                for n, ms in heartbeat.dispatchers(view.redis, view.keys)]  # fmt: skip
