"""Which functions a zsched worker may run for Django: only module-level functions decorated
as Django tasks, found in the `tasks` modules of INSTALLED_APPS (and OPTIONS["TASK_MODULES"]).
A task name read from Redis is looked up here, never imported."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from zsched.integrations.django.compat import Task


def _tasks_in(module: Any) -> Iterable[Any]:
    for value in vars(module).values():
        if isinstance(value, Task):
            yield value


def discover(extra_modules: Iterable[str] = ()) -> dict[str, Any]:
    """module path -> Task of every Django task defined in the project's task modules."""
    from django.apps import apps
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")
    names = [f"{cfg.name}.tasks" for cfg in apps.get_app_configs()]
    found: dict[str, Any] = {}
    for name in [*names, *extra_modules]:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the app has no tasks module
                continue
            raise
        for t in _tasks_in(module):
            found[t.module_path] = t
    return found
