"""One import point for both Django lines: Django 6's own `django.tasks`, else the
`django-tasks` backport (Django 4.2-5.2), which has the same API under `django_tasks`."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task
    from django.tasks import signals as signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist

    LINE = "django.tasks"
except ImportError:  # Django < 6: the backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task  # type: ignore[no-redef,unused-ignore]
    from django_tasks import signals as signals  # type: ignore[no-redef,unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,unused-ignore]
    from django_tasks.base import Task, TaskError  # type: ignore[no-redef,unused-ignore]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef,unused-ignore]

    LINE = "django_tasks"

__all__ = [
    "LINE",
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "module_path",
    "signals",
    "task",
]


def module_path(obj: Any) -> str:
    """`module.qualname` of a function or class: the name a Django task is known by."""
    return f"{obj.__module__}.{obj.__qualname__}"
