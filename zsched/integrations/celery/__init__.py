"""zsched decides *when*, Celery's workers keep doing *how* (docs/celery.md).

- `celery_rule` / `App.schedule(..., celery_task=...)`: a rule whose fires are Celery tasks.
- `register_bridge` and `zsched celery-bridge`: a zsched consumer that sends each fire with
  `send_task(..., task_id=<run id>)`.
- `install_overlap_hook`: in the Celery worker, tells the bridge when a fire's task finished,
  so overlap skip/queue hold for the task's whole life.
- `from_beat_schedule`: `celery_app.conf.beat_schedule` as zsched rules.
- `Scheduler`: a drop-in for `celery beat -S`, safe to run in any number of copies.
"""

from __future__ import annotations

from typing import Any

from zsched.integrations.celery.beat import from_beat_schedule
from zsched.integrations.celery.bridge import enqueue_celery, register_bridge
from zsched.integrations.celery.hook import install_overlap_hook
from zsched.integrations.celery.rules import BRIDGE_TASK, celery_rule

__all__ = [
    "BRIDGE_TASK",
    "Scheduler",
    "celery_rule",
    "enqueue_celery",
    "from_beat_schedule",
    "install_overlap_hook",
    "register_bridge",
]


def __getattr__(name: str) -> Any:
    # The Beat drop-in subclasses celery.beat.Scheduler: imported only when asked for.
    if name == "Scheduler":
        from zsched.integrations.celery.scheduler import Scheduler

        return Scheduler
    raise AttributeError(name)
