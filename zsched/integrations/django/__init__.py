"""zsched as a backend of Django's tasks framework (docs/django.md).

- `ZschedBackend`: TASKS = {"default": {"BACKEND": "zsched.integrations.django.ZschedBackend"}}
- INSTALLED_APPS += ["zsched.integrations.django"]: `manage.py zsched_dispatcher` and
  `manage.py zsched_worker`.

Serves Django 6's own `django.tasks` and the `django-tasks` backport on Django 4.2-5.2.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ZschedBackend"]


def __getattr__(name: str) -> Any:
    # Imported on use: Django loads this package as an app before its settings are complete.
    if name == "ZschedBackend":
        from zsched.integrations.django.backend import ZschedBackend

        return ZschedBackend
    raise AttributeError(name)
