"""Fixtures of the console's tests: a seeded queue on the suite's redis-server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from console_seed import CREDS, TOKEN, Seeded, seed  # noqa: F401 - shared with the test modules


@pytest.fixture
def client(redis_url: str) -> Any:
    c = redis.Redis.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture
async def seeded(client: Any, redis_url: str, queue: str) -> AsyncIterator[Seeded]:
    ac = aioredis.Redis.from_url(redis_url, protocol=2)
    try:
        yield await seed(client, ac, queue)
    finally:
        await ac.aclose()
