"""The App's run-control methods (a mixin, so app.py stays small): reschedule, ...

Each method builds one `zsched.runs.controls` call and runs it; an async App runs the same call
on its AsyncScripts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zsched.errors import InvalidArgument
from zsched.runs import controls as C
from zsched.runs import entry_shape
from zsched.runs.enqueue import EnqueuedId, Group
from zsched.runs.runinput import check_names, check_pause_note, delay_ms, to_ms
from zsched.store import durable as _durable
from zsched.store.scripts import Call

if TYPE_CHECKING:
    from zsched.context import QueueContext
    from zsched.rules.controls import ManualFire
    from zsched.runs.status import QueueStatus


def due_arg(
    ctx: QueueContext, run_at: datetime | float | None, delay: timedelta | float | None
) -> int | str:
    """The run_at_ms argument of a script: epoch ms, or "+N" (relative to Redis TIME) for a
    delay unless the App's clock is pinned (a test's FakeClock)."""
    if (run_at is None) == (delay is None):
        raise InvalidArgument("give exactly one of run_at or delay")
    if run_at is not None:
        return to_ms(run_at)
    d = delay_ms(delay)  # type: ignore[arg-type]
    now = ctx.clock.now_ms()
    return f"+{d}" if now is None else int(now) + d


class ControlMethods:
    """Run controls of an App: change a promise after it is made."""

    ctx: QueueContext

    if TYPE_CHECKING:

        def status(self) -> QueueStatus: ...

    def reschedule_call(
        self,
        run_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> Call[C.RescheduleResult]:
        """The script call of `reschedule` (an async App runs it on its own scripts)."""
        app = self.ctx
        check_names("reschedule", run_id)
        at = due_arg(app, run_at, delay)
        return C.reschedule(app.keys_for_run(run_id), run_id, at, now_ms=app.clock.now_ms())

    def reschedule(
        self,
        run_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> C.RescheduleResult:
        """Move a delayed run to a new due time (`run_at`, or `delay` from now on the Redis
        clock), atomically. The result tells moved from not found and from a run that is
        not delayed any more (ready, running, done, dead); moving it earlier wakes the
        dispatchers."""
        app = self.ctx
        return app.scripts.run(self.reschedule_call(run_id, run_at=run_at, delay=delay))

    def pause_queue(self, note: str | None = None) -> bool:
        """Pause the queue (every partition): dispatchers move nothing onto the ready stream
        until resume_queue. Delayed runs wait; rule slots are still fired into the delayed
        set and recorded; workers finish what is on the stream. False if already paused."""
        app = self.ctx
        check_pause_note(note)
        now = app.clock.now_ms()
        return any([v.scripts.run(C.pause(v.keys, note, now_ms=now)) for v in app.views()])

    def resume_queue(self) -> bool:
        """End the pause (every partition) and wake the dispatchers. False if not paused."""
        app = self.ctx
        now = app.clock.now_ms()
        return any([v.scripts.run(C.resume(v.keys, now_ms=now)) for v in app.views()])

    def entry_shapes(self) -> list[entry_shape.PartitionShape]:
        """The shape of entry each partition's dispatchers write on the ready stream (plain or
        tagged), with the consumers of its group and what each registered that it reads
        (docs/operations.md, "Upgrading from zsched 0.3")."""
        return [entry_shape.read(v.redis, v.keys) for v in self.ctx.views()]

    def set_entry_shape(self, shape: str) -> None:
        """Set the shape on every partition; dispatchers write it from their next move. It
        checks no consumer: `entry_shapes()` names those that may read plain entries only."""
        for v in self.ctx.views():
            entry_shape.write(v.redis, v.keys, shape)

    def drain(
        self,
        timeout: float | None = None,
        progress: Any = None,
        poll: float = 0.5,
    ) -> bool:
        """Pause the queue, then wait until its ready stream is empty (every run dispatched
        before the pause finished) or `timeout` seconds pass. `progress(status)` is called
        at each poll. True when drained. The queue stays paused: resume_queue after the
        deploy."""
        import time as _time

        self.pause_queue("drain")
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            st = self.status()
            if progress is not None:
                progress(st)
            if st.stream_length == 0:
                return True
            if deadline is not None and _time.monotonic() >= deadline:
                return False
            _time.sleep(poll)

    def run_schedule_now(self, schedule_id: str, force: bool = False) -> ManualFire:
        """Fire a recurring rule once now: run id `<id>@manual:<instant>`, ledger outcome
        `manual`, the rule's slots unchanged. The overlap policy holds (a run still holding
        the lease: skipped, or queued behind it) unless `force=True`."""
        from zsched.rules.controls import run_now

        app = self.ctx
        return run_now(app.rule_home(schedule_id), schedule_id, force)

    def enqueue_conflict_call(
        self,
        group: Group,
        on_conflict: str,
        max_delay: timedelta | float | None,
    ) -> Call[C.ReplaceResult]:
        """The replace.lua call of an enqueue with on_conflict="replace" or "debounce"."""
        app = self.ctx
        if on_conflict not in C.CONFLICT_MODES:
            raise InvalidArgument(
                f"on_conflict must be one of {', '.join(C.CONFLICT_MODES)}, got {on_conflict!r}",
                "on_conflict",
            )
        if on_conflict == "keep":
            raise InvalidArgument("max_delay is only for on_conflict='debounce'", "max_delay")
        if (on_conflict == "debounce") != (max_delay is not None):
            raise InvalidArgument(
                "on_conflict='debounce' needs max_delay (and only it takes one)", "max_delay"
            )
        cap = None if max_delay is None else delay_ms(max_delay)
        return C.replace(
            app.keys_for_run(group[0]),
            group,
            now_ms=app.clock.now_ms(),
            dedupe_window_ms=app.settings.dedupe_window_ms,
            max_envelope_bytes=app.settings.max_payload_bytes + 4096,
            max_delay_ms=cap,
        )

    def enqueue_conflict(
        self,
        group: Group,
        on_conflict: str,
        max_delay: timedelta | float | None,
    ) -> EnqueuedId:
        """Run an enqueue with a conflict mode; count its outcome; its EnqueuedId."""
        app = self.ctx
        call = self.enqueue_conflict_call(group, on_conflict, max_delay)
        res: C.ReplaceResult = _durable.run_calls(app, [call])[0]  # WAITs when app.durable
        count_conflict(app, res.outcome)
        return enqueued_id(res)

    def enqueue_conflicts(self, items: list[tuple[Any, str, Any]]) -> list[EnqueuedId]:
        """enqueue_many's runs with a conflict mode: (group, on_conflict, max_delay) each,
        one replace.lua call per run, streamed on one connection."""
        app = self.ctx
        calls = [self.enqueue_conflict_call(g, mode, cap) for g, mode, cap in items]
        out = []
        for res in _durable.run_calls(app, calls):
            count_conflict(app, res.outcome)
            out.append(enqueued_id(res))
        return out


def enqueued_id(res: C.ReplaceResult) -> EnqueuedId:
    """The EnqueuedId of a replace.lua answer."""
    dup = res.outcome in (C.EnqueueOutcome.DUPLICATE, C.EnqueueOutcome.DUPLICATE_DONE)
    return EnqueuedId(res.run_id, dup, res.outcome)


def count_conflict(ctx: QueueContext, outcome: C.EnqueueOutcome) -> None:
    """Count an enqueue's outcome in the App's metrics (as enqueue counts its own)."""
    if outcome is C.EnqueueOutcome.ENQUEUED:
        ctx.metrics.enqueued.labels(ctx.queue).inc()
    elif outcome in (C.EnqueueOutcome.REPLACED, C.EnqueueOutcome.DEBOUNCED):
        ctx.metrics.replaced.labels(ctx.queue, outcome.value).inc()
    else:
        ctx.metrics.duplicates.labels(ctx.queue, "enqueue").inc()


class CancelMethods:
    """cancel of an App (mixed in with ControlMethods)."""

    ctx: QueueContext

    def cancel_call(self, run_id: str) -> Call[C.CancelResult]:
        """The revoke call of `cancel` (which also ends a rule fire's overlap lease), so an
        async App runs the same call."""
        app = self.ctx
        check_names("cancel", run_id)
        return C.revoke(app.keys_for_run(run_id), run_id, now_ms=app.clock.now_ms(),
                        dedupe_window_ms=app.settings.dedupe_window_ms)  # fmt: skip

    def cancel_run(self, run_id: str) -> C.CancelResult:
        """Cancel a run wherever it is: delayed or ready runs are removed at once (the result
        is true); a running run is asked to stop (`.requested`): its worker learns within its
        hold renewal interval, cancels an async handler's task or sets a sync handler's
        `current_run().cancel_requested`, and the run ends `cancelled`. Otherwise the result
        says not found, done or cancelled already. A removed rule fire's overlap lease is
        freed (and a fire waiting for it started) in the same script call."""
        res: C.CancelResult = self.ctx.scripts.run(self.cancel_call(run_id))
        return res
