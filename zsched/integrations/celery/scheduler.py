"""`celery -A proj beat -S zsched.integrations.celery:Scheduler`: Beat, leaderless.

The scheduler declares the app's beat_schedule as zsched rules and runs a zsched dispatcher
and the bridge in a thread of the beat process. Every copy of it computes the same slots and
the dispatch scripts hand each fire out once, so any number of beat processes can run at
once. Configuration: `zsched_redis_url` (else $ZSCHED_REDIS_URL) and `zsched_queue` (else
"default") in the Celery app's conf.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from celery import beat

log = logging.getLogger(__name__)


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """A Celery Beat scheduler whose slots are kept and handed out by zsched."""

    #: How often beat's own loop checks that the zsched thread is alive (s).
    max_interval = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.zsched_app: Any = None
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        import zsched
        from zsched.integrations.celery.beat import from_beat_schedule
        from zsched.integrations.celery.bridge import register_bridge

        conf = self.app.conf
        url = conf.get("zsched_redis_url") or zsched.config.redis_url_from_env()
        self.zsched_app = app = zsched.App(url, queue=conf.get("zsched_queue") or "default")
        register_bridge(app, self.app)
        from_beat_schedule(self.app, app)
        self._thread = threading.Thread(target=self._serve, name="zsched-beat", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            d, w = self.zsched_app.dispatcher(), self.zsched_app.worker()
            try:  # the dispatcher syncs the declared rules when it starts
                await asyncio.gather(d.run(self._stop), w.run(self._stop))
            finally:
                await w.close()
                await d.close()

        asyncio.run(main())

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """zsched's thread does the work; beat's loop only watches it."""
        if self._thread is not None and not self._thread.is_alive():
            raise RuntimeError("zsched's dispatcher thread stopped; see the log above")
        return float(self.max_interval)

    def sync(self) -> None:
        """Nothing to write: the rules' state lives in Redis, written by each fire."""

    def close(self) -> None:
        """Stop the dispatcher and the bridge (beat calls this more than once on shutdown)."""
        loop, stop, thread, app = self._loop, self._stop, self._thread, self.zsched_app
        self._loop = self._stop = self._thread = self.zsched_app = None
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed in between: the thread is done
                pass
        if thread is not None:
            thread.join(timeout=15)
        if app is not None:
            app.close()

    @property
    def info(self) -> str:
        app = self.zsched_app
        return f"zsched queue {app.queue!r} (leaderless)" if app is not None else "zsched"
