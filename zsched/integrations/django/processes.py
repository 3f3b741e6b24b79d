"""What the management commands run: dispatchers and workers of the backend's queues."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable
from typing import Any

from zsched import eventloop
from zsched.config import event_loop_from_env


def backend_named(alias: str) -> Any:
    from django.core.management.base import CommandError

    from zsched.integrations.django.backend import ZschedBackend
    from zsched.integrations.django.compat import LINE

    if LINE == "django.tasks":
        from django.tasks import task_backends
    else:
        from django_tasks import task_backends  # type: ignore[no-redef,unused-ignore]
    backend = task_backends[alias]
    if not isinstance(backend, ZschedBackend):
        raise CommandError(f"TASKS[{alias!r}] is not a zsched backend ({type(backend).__name__})")
    return backend


def queues(backend: Any, wanted: Iterable[str] | None) -> list[str]:
    from django.core.management.base import CommandError

    names = list(wanted or sorted(backend.queues) or ["default"])
    bad = [q for q in names if backend.queues and q not in backend.queues]
    if bad:
        raise CommandError(
            f"queue(s) {', '.join(bad)} not in TASKS QUEUES {sorted(backend.queues)}"
        )
    return names


def run_loops(make: list[Any]) -> None:
    """Run the loops (objects with run(stop) and close()) until SIGTERM or SIGINT."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await asyncio.gather(*(x.run(stop) for x in make))
        finally:
            for x in make:
                await x.close()

    # As `zsched worker` does: uvloop when installed, unless ZSCHED_EVENT_LOOP says otherwise.
    eventloop.run(main(), event_loop_from_env())
