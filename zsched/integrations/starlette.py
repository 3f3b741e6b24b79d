"""FastAPI / Starlette wiring: a lifespan that opens zsched at start-up and closes it at
shutdown, and a dependency that hands it to endpoints (docs/fastapi.md).

    zsched_app_ = zsched.App(os.environ["ZSCHED_REDIS_URL"], queue="reminders")
    api = FastAPI(lifespan=zsched_lifespan(zsched_app_))

    @api.post("/reminders")
    async def add(zs = Depends(zsched_app)):
        await zs.enqueue("send_reminder", {...}, run_at=...)

Endpoints get the App's asyncio face, a `zsched.AsyncApp` (`App.aio()`): App's methods of the
same names, arguments and results as coroutines (enqueue with on_conflict=, reschedule,
cancel, get_run, schedule ...), on an asyncio client, closed by the lifespan (`aclose()`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from starlette.requests import HTTPConnection

from zsched.app import App, AsyncApp

#: Where the lifespan puts the async app: request.state.<key> and app.state.<key>.
STATE_KEY = "zsched"
Source = App | Callable[[], App] | None
Lifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]


def as_async(app: App) -> AsyncApp:
    """The AsyncApp endpoints get: `app.aio()` (sharing the App's tasks, rules and settings)."""
    return app.aio()


def zsched_lifespan(
    source: Source = None, *, state_key: str = STATE_KEY, inner: Lifespan | None = None
) -> Lifespan:
    """A lifespan for `FastAPI(lifespan=...)` / `Starlette(lifespan=...)`.

    `source`: an App (kept open: yours to close), or a function that makes one at start-up
    (closed at shutdown), or None for `App()` from $ZSCHED_REDIS_URL. `inner`: your own
    lifespan, entered inside this one; its state is kept beside zsched's."""

    @asynccontextmanager
    async def lifespan(asgi_app: Any) -> AsyncIterator[dict[str, Any]]:
        made = not isinstance(source, App)
        if isinstance(source, App):
            app = source
        else:  # built in a thread: App() may read the queue's layout from Redis
            app = await asyncio.to_thread(source or App)
        aapp = as_async(app)
        state = getattr(asgi_app, "state", None)
        if state is not None:
            setattr(state, state_key, aapp)
        try:
            if inner is None:
                yield {state_key: aapp}
            else:
                async with inner(asgi_app) as extra:
                    yield {**(extra or {}), state_key: aapp}
        finally:
            await aapp.aclose()
            if made:
                await asyncio.to_thread(app.close)

    return lifespan


def zsched_dependency(state_key: str = STATE_KEY) -> Callable[[HTTPConnection], Any]:
    """A dependency returning the async app the lifespan opened under `state_key`."""

    def dependency(conn: HTTPConnection) -> Any:
        found = getattr(conn.state, state_key, None)
        if found is None:
            found = getattr(getattr(conn.app, "state", None), state_key, None)
        if found is None:
            raise RuntimeError(
                f"no zsched app in the request state ({state_key!r}): pass "
                "lifespan=zsched_lifespan(...) to FastAPI/Starlette"
            )
        return found

    return dependency


#: `Depends(zsched_app)`: the async app of the default lifespan (FastAPI), or
#: `zsched_app(request)` in a Starlette endpoint.
zsched_app = zsched_dependency()
