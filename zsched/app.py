"""The two public facades, App and AsyncApp, as thin classes over their bodies: AppCore
(zsched/app_core.py) and AsyncAppCore (zsched/aio.py, which wraps an AppCore). What ties the
two facades together lives here only: `App.aio()` makes an AsyncApp, `AsyncApp(...)` makes an
App. So `app -> aio -> app_core` is a line, not an import circle (docs/architecture.md)."""

from __future__ import annotations

from typing import Any, Unpack

from zsched.aio import AsyncAppCore, split_client
from zsched.app_core import DEFAULT_URL as DEFAULT_URL
from zsched.app_core import ENQUEUE_BATCH as ENQUEUE_BATCH
from zsched.app_core import AppCore
from zsched.app_core import AppOptions as AppOptions
from zsched.app_core import EnqueuedId as EnqueuedId

__all__ = ["DEFAULT_URL", "ENQUEUE_BATCH", "App", "AppOptions", "AsyncApp", "EnqueuedId"]


class App(AppCore):
    """One queue: register tasks, enqueue runs, inspect them; builds dispatchers and workers."""

    def aio(self, redis: Any = None) -> AsyncApp:
        """An AsyncApp sharing this App's tasks, declared rules, settings and metrics, on an
        asyncio client of the same deployment (or `redis`, an asyncio client); close it with
        `await aio.aclose()` (this App stays open)."""
        return AsyncApp.from_app(self, redis)


class AsyncApp(AsyncAppCore):
    """One queue, for asyncio code: the App's constructor, its Redis methods as coroutines."""

    #: The App it wraps (its tasks, rules declared in code, settings, metrics).
    app: App

    def __init__(
        self, redis: Any = None, queue: str = "default", **options: Unpack[AppOptions]
    ) -> None:
        """The arguments of App (`options`: settings, clock, metrics, partitions, durable,
        durable_timeout, spin_us, as App takes them). `redis` is a URL, None
        (ZSCHED_REDIS_URL), a sync redis-py client, or a redis.asyncio client of one server
        (its sync twin, for the operations run in a thread, is made from the same connection
        settings; for Cluster or Sentinel pass the URL). `partitions="auto"` reads the
        recorded count here, with a blocking call."""
        given_async, sync = split_client(redis)
        self._init(App(sync, queue, **options), owns_app=True, redis=given_async)
