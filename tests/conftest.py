"""Shared fixtures: a private redis-server for the session, fakeredis as a second backend.

Each test gets its own queue name instead of FLUSHALL, so tests can share the server.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

sys.path.insert(0, str(Path(__file__).parent))

from redis_server import RedisServer  # noqa: E402

import zsched  # noqa: E402
from zsched.observability.metrics import Metrics  # noqa: E402


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def queue() -> str:
    return "t-" + uuid.uuid4().hex[:12]


class Backend:
    """A sync and an asyncio client on the same data: real Redis or fakeredis."""

    def __init__(self, name: str, url: str | None) -> None:
        self.name = name
        if name == "redis":
            assert url
            self.url = url
            self.sync: Any = redis.Redis.from_url(url, protocol=2)
        else:
            import fakeredis

            self.url = None
            self.server = fakeredis.FakeServer()
            self.sync = fakeredis.FakeRedis(server=self.server, protocol=2)

    def async_client(self) -> Any:
        if self.name == "redis":
            import redis.asyncio as aioredis

            return aioredis.Redis.from_url(self.url, protocol=2)
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=self.server, protocol=2)

    def app(self, queue: str, **kw: Any) -> zsched.App:
        kw.setdefault("metrics", Metrics())
        return zsched.App(self.sync, queue=queue, **kw)


@pytest.fixture(params=["redis", "fake"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    b = Backend(request.param, url)
    yield b
    b.sync.close()


@pytest.fixture
def real(redis_url: str) -> Iterator[Backend]:
    """Only the real redis-server (for behaviour fakeredis does not model)."""
    b = Backend("redis", redis_url)
    yield b
    b.sync.close()


@pytest.fixture
async def aclient(backend: Backend) -> AsyncIterator[Any]:
    c = backend.async_client()
    yield c
    await c.aclose()
