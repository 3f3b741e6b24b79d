"""The Django app of zsched's integration: add "zsched.integrations.django" to INSTALLED_APPS
for the management commands `zsched_dispatcher` and `zsched_worker`."""

from __future__ import annotations

from django.apps import AppConfig


class ZschedConfig(AppConfig):  # type: ignore[misc]
    """zsched's management commands."""

    name = "zsched.integrations.django"
    label = "zsched"
    verbose_name = "zsched"
