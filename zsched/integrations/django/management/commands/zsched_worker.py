"""`manage.py zsched_worker`: run the project's Django tasks from zsched."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a zsched worker for the Django task queues: only @task functions run."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="TASKS alias (default: default)")
        parser.add_argument("--queue", action="append", help="Django queue (default: all)")
        parser.add_argument("--concurrency", type=int, default=8, help="tasks at once (default 8)")

    def handle(self, *args: Any, **opts: Any) -> None:
        from zsched.integrations.django.processes import backend_named, queues, run_loops
        from zsched.integrations.django.runner import worker_app

        backend = backend_named(opts["backend"])
        names = queues(backend, opts["queue"])
        tasks = sorted(backend.tasks())
        self.stderr.write(f"zsched worker for queue(s) {', '.join(names)}: {len(tasks)} task(s)")
        run_loops([worker_app(backend, q).worker(concurrency=opts["concurrency"]) for q in names])
