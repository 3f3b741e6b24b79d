"""The pytest plugin of zsched.testing (entry point `pytest11`, name `zsched`).

Fixtures:
- `zsched_clock`: the FakeClock of `zsched_app`;
- `zsched_app`: a `Kit` with a fresh App (queue "test") on fakeredis, closed after the test;
- `zsched_kit`: a factory, `zsched_kit(my_app, start=...)`, that points your own App at a
  kit for the test and gives it back afterwards.

`--zsched-redis-url URL` (or `ZSCHED_TEST_REDIS_URL`) runs them on a real redis-server instead.
Nothing here is imported until a fixture is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from zsched.clock import FakeClock
    from zsched.testing import Kit


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--zsched-redis-url", default=None,
        help="run zsched.testing's fixtures on this redis-server (default: fakeredis; "
             "env ZSCHED_TEST_REDIS_URL)",
    )  # fmt: skip


def _url(config: pytest.Config) -> str | None:
    given = config.getoption("--zsched-redis-url", default=None)
    return given or os.environ.get("ZSCHED_TEST_REDIS_URL") or None


@pytest.fixture
def zsched_kit(request: pytest.FixtureRequest) -> Iterator[Callable[..., Kit]]:
    """Make kits (`zsched_kit(app=None, start=None, queue=None)`), all closed after the test."""
    from zsched.testing import Kit

    made: list[Kit] = []

    def make(app: Any = None, **kw: Any) -> Kit:
        kw.setdefault("redis_url", _url(request.config))
        if kw["redis_url"] and kw.get("queue") is None:
            import uuid

            kw["queue"] = "test-" + uuid.uuid4().hex[:12]  # a real server: a queue of its own
        made.append(Kit(app, **kw))
        return made[-1]

    yield make
    for kit in reversed(made):
        kit.close()


@pytest.fixture
def zsched_app(zsched_kit: Callable[..., Kit]) -> Kit:
    """A Kit with a fresh App: register tasks on `zsched_app.app`."""
    return zsched_kit()


@pytest.fixture
def zsched_clock(zsched_app: Kit) -> FakeClock:
    """The FakeClock of `zsched_app`."""
    return zsched_app.clock
