"""`manage.py zsched_dispatcher`: dispatch due Django task runs; sync PERIODIC_TASKS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a zsched dispatcher for the Django task queues (any number may run at once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="TASKS alias (default: default)")
        parser.add_argument("--queue", action="append", help="Django queue (default: all)")

    def handle(self, *args: Any, **opts: Any) -> None:
        from zsched.integrations.django.processes import backend_named, queues, run_loops

        backend = backend_named(opts["backend"])
        backend.declare_periodic()  # each dispatcher syncs its App's declared rules at start
        names = queues(backend, opts["queue"])
        self.stderr.write(f"zsched dispatcher for queue(s) {', '.join(names)}")
        run_loops([backend.app_for(q).dispatcher() for q in names])
