"""The App's run-control methods (a mixin, so app.py stays small): reschedule, ...

Each method builds one `zsched.controls` call and runs it; an async App runs the same call
on its AsyncScripts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import controls as C
from .runinput import check_names, delay_ms, to_ms
from .scripts import Call

if TYPE_CHECKING:
    from .app import App


def due_arg(
    app: Any, run_at: datetime | float | None, delay: timedelta | float | None
) -> int | str:
    """The run_at_ms argument of a script: epoch ms, or "+N" (relative to Redis TIME) for a
    delay unless the App's clock is pinned (a test's FakeClock)."""
    if (run_at is None) == (delay is None):
        raise ValueError("give exactly one of run_at or delay")
    if run_at is not None:
        return to_ms(run_at)
    d = delay_ms(delay)  # type: ignore[arg-type]
    now = app.clock.now_ms()
    return f"+{d}" if now is None else int(now) + d


class ControlMethods:
    """Run controls of an App: change a promise after it is made."""

    def reschedule_call(
        self,
        run_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> Call[C.RescheduleResult]:
        """The script call of `reschedule` (an async App runs it on its own scripts)."""
        app: App = self  # type: ignore[assignment]
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
        app: App = self  # type: ignore[assignment]
        return app.scripts.run(self.reschedule_call(run_id, run_at=run_at, delay=delay))
