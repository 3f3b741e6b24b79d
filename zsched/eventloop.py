"""The event loop a zsched process runs on: uvloop where it is installed, else asyncio's.

`zsched worker`, `zsched dispatcher` and `zsched web` choose it at start-up (`--event-loop`,
else ZSCHED_EVENT_LOOP, else `auto`). uvloop is a dependency on CPython outside Windows: with
handlers that await 2 ms it cut the worker's CPU per run by 13-23 % (BENCHMARKS.md, session
19), and the loop is the whole difference. Code that runs in an application's own loop
(AsyncApp, the integrations) keeps whatever loop the application runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from zsched.config import EVENT_LOOPS
from zsched.errors import ConfigError

T = TypeVar("T")
log = logging.getLogger(__name__)

#: auto: uvloop when it imports, else asyncio's own; uvloop: uvloop or a ConfigError.
CHOICES = EVENT_LOOPS


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the loop `choice` names (None: asyncio's default). ConfigError for a choice
    not in CHOICES, or for `uvloop` when uvloop cannot be imported."""
    if choice not in CHOICES:
        raise ConfigError(f"event loop must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if choice == "auto":
            return None
        raise ConfigError("event loop 'uvloop' was asked for, but uvloop is not installed "
                          "(pip install uvloop; or choose 'auto' or 'asyncio')") from exc  # fmt: skip
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """asyncio.run(main) on the loop `choice` names."""
    try:
        factory = loop_factory(choice)
    except ConfigError:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        log.debug("event loop %s asked for: running on %s", choice,
                  name(runner.get_loop()))  # fmt: skip
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop) -> str:
    """`uvloop` or `asyncio`: what a log line says a process runs on."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
