"""The App's recurring-rule methods (a mixin, so app.py stays about runs).

On a partitioned queue each rule lives in one partition, chosen by its id: every method here
routes to that partition's view, and the listing methods gather all partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from zsched.errors import InvalidArgument
from zsched.protocol.replies import ScheduleResult

if TYPE_CHECKING:
    from zsched.context import QueueContext

T = TypeVar("T")


class ScheduleMethods:
    """Recurring rules of an App: schedule, declare, sync, pause, resume, backfill, list."""

    ctx: QueueContext

    def _ride(self, what: str, call: Callable[[int], T]) -> T:
        # Rule operations ride through a failover like enqueue (App.ride): an upsert, a pause
        # or a backfill done twice is done once (by schedule id and slot run ids). A retry
        # after a lost reply may answer "unchanged" / False for what the first attempt did.
        return self.ctx.ride(what, call)

    def schedule(
        self, schedule_id: str, task_name: str | None = None, **options: Any
    ) -> ScheduleResult:
        """Create or edit a recurring rule (upsert; history kept, next fire recomputed).

        Options: cron= | every=, tz=, payload=, misfire="coalesce"|"catch_up"|"skip",
        misfire_grace=, overlap="allow"|"skip"|"queue", max_catch_up=, jitter=, start_at=,
        end_at=, paused=, lease=, dst_gap="shift"|"skip", dst_repeat="first"|"both".
        Returns a ScheduleResult: CREATED, UPDATED or UNCHANGED (an IntEnum, equal to the
        1, 2 or 0 that earlier versions returned).
        `celery_task=` instead of a task name: each fire is sent to Celery (docs/celery.md).
        """
        from zsched.rules import ops as schedule_ops

        task_name, options = _target(schedule_id, task_name, options)
        home = self.ctx.rule_home(schedule_id)
        return self._ride(
            f"schedule {schedule_id!r}",
            lambda _: schedule_ops.upsert(home, schedule_id, task_name, **options),
        )

    def declare(self, schedule_id: str, task_name: str | None = None, **options: Any) -> None:
        """Declare a rule in code (like Celery's beat_schedule); validated now, written to
        Redis when a dispatcher starts (`sync_schedules`). Takes `celery_task=` too."""
        from zsched.rules.spec import build_spec

        task_name, options = _target(schedule_id, task_name, options)

        build_spec(schedule_id, task_name, **options)
        self.ctx.declared[schedule_id] = {"task": task_name, **options}

    def sync_schedules(self, prune: bool = False) -> dict[str, list[str]]:
        """Write the declared rules; report rules only in Redis (removed only with prune).
        Returns ids by `created`, `updated`, `unchanged`, `undeclared`, `removed` and
        `unreadable` (stored in a form this zsched cannot read: kept as stored, not synced)."""
        return self._ride(
            "sync of declared schedules",
            lambda _: self._sync_once(prune),
        )

    def _sync_once(self, prune: bool) -> dict[str, list[str]]:
        from zsched.rules import ops as schedule_ops

        total: dict[str, list[str]] = {}
        for c in self.ctx.rule_homes():
            for k, v in schedule_ops.sync_declared(c, c.declared_here(), prune).items():
                total.setdefault(k, []).extend(v)
        return total

    def unschedule(self, schedule_id: str) -> bool:
        """Remove a rule, its state and ledger. Runs it already made are untouched."""
        from zsched.rules import ops as schedule_ops

        home = self.ctx.rule_home(schedule_id)
        return self._ride(
            f"unschedule {schedule_id!r}",
            lambda _: schedule_ops.remove(home, schedule_id),
        )

    def pause_schedule(
        self, schedule_id: str, note: str | None = None, by: str | None = None
    ) -> bool:
        """Stop firing; the slots until resume are recorded as skipped (paused). `note` (why)
        and `by` (who: a name without ':') are kept with the pause time: `schedules()` shows
        them, and the ledger's skipped entries read `paused[ by <by>][: <note>]`."""
        from zsched.rules import ops as schedule_ops

        home = self.ctx.rule_home(schedule_id)
        return self._ride(
            f"pause of schedule {schedule_id!r}",
            lambda _: schedule_ops.pause(home, schedule_id, note, by),
        )

    def resume_schedule(self, schedule_id: str) -> bool:
        """Fire again from the next slot after now."""
        from zsched.rules import ops as schedule_ops

        home = self.ctx.rule_home(schedule_id)
        return self._ride(
            f"resume of schedule {schedule_id!r}",
            lambda _: schedule_ops.resume(home, schedule_id),
        )

    def backfill(self, schedule_id: str, start: datetime | float, end: datetime | float) -> int:
        """Enqueue a past range's slots with their usual run ids; re-running adds nothing.
        Returns the runs added; a range of more than 10,000 slots is a RuleError."""
        from zsched.rules import ops as schedule_ops

        home = self.ctx.rule_home(schedule_id)
        return self._ride(
            f"backfill of schedule {schedule_id!r}",
            lambda _: schedule_ops.backfill(home, schedule_id, start, end),
        )

    def schedules(self) -> list[Any]:
        """Every rule with next fire, last fire, last outcome and missed count."""
        from zsched.rules import ops as schedule_ops

        out = [i for c in self.ctx.rule_homes() for i in schedule_ops.infos(c)]
        return sorted(out, key=lambda i: i.schedule_id)

    def schedule_history(self, schedule_id: str, count: int = 100) -> list[dict[str, Any]]:
        """The rule's fire ledger, newest first: one outcome per slot."""
        from zsched.rules import ledger

        home = self.ctx.rule_home(schedule_id)
        return ledger.history(home.redis, home.keys, schedule_id, count)

    def audit_schedules(self) -> list[Any]:
        """Slots past their grace with no outcome in the ledger, per rule (see zsched.rules.audit)."""
        from zsched.rules.audit import audit

        return [r for c in self.ctx.rule_homes() for r in audit(c)]


def _target(
    schedule_id: str, task_name: str | None, options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """A rule's zsched task: the one named, or the Celery bridge's for `celery_task=`."""
    if "celery_task" in options:
        if task_name is not None:
            raise InvalidArgument(
                f"schedule {schedule_id}: give a task name or celery_task, not both", "celery_task"
            )
        from zsched.integrations.celery.rules import celery_rule

        return celery_rule(schedule_id, **options)
    if task_name is None:
        raise InvalidArgument(
            f"schedule {schedule_id}: a task name (or celery_task=) is required", "task_name"
        )
    return task_name, options
