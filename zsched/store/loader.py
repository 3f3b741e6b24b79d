"""Lua loading and the runners: where the .lua files are, their sources, and `Scripts` /
`AsyncScripts`, which register them with redis-py (EVALSHA, reload after NOSCRIPT,
pipeline-safe) and run a `Call` (zsched/store/scripts.py builds one per script).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Generic, TypeVar

import redis

from zsched.errors import ScriptError
from zsched.store.direct import DEFAULT_SPIN_US, FALLBACK, DirectConnections

T = TypeVar("T")

NAMES = (
    "enqueue", "dispatch", "ack", "retry", "release", "dead", "reclaim", "renew", "cancel",
    "replay", "schedule", "unschedule", "fire", "unlease", "status", "migrate", "backfill", "extend",
    "reschedule", "replace", "revoke", "discard", "record", "pause", "resume",
    "acquire",
)  # fmt: skip
#: Former names of scripts, kept as files for clients that load them by name (Lua files are
#: public API): the alias is the same script under its old name (a test keeps them equal).
ALIASES = {"hold": "extend"}
# Reply codes are named once, in zsched/protocol/replies.py (an IntEnum per family).


def lua_dir() -> Path:
    """The folder holding the .lua files: the repo's lua/ or the installed package data.

    The wheel installs them as zsched/lua/, a folder without __init__.py, so
    importlib.resources sees a namespace package whose str() is not a path: look for
    the folder beside this package first, and only then ask importlib.resources.
    """
    here = Path(__file__).resolve()
    for parent in here.parents[:3]:  # the repo's lua/, or zsched/lua/ in site-packages
        candidate = parent / "lua"
        if (candidate / "enqueue.lua").is_file():
            return candidate
    traversable = resources.files("zsched") / "lua"
    if isinstance(traversable, Path):
        return traversable
    raise ScriptError(f"the Lua scripts are not installed as files ({traversable!r})")


@cache
def source(name: str) -> str:
    """The Lua source of one script."""
    path = lua_dir() / f"{name}.lua"
    if name not in NAMES and not path.exists():
        raise ScriptError(f"no Lua script named {name!r}")
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot read Lua script {name!r}: {exc}") from exc


@cache
def sha(name: str) -> str:
    """The SHA1 Redis caches one script's source under (for EVALSHA)."""
    return hashlib.sha1(source(name).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script invocation, ready to run on any client."""

    name: str
    keys: list[str]
    args: list[Any]
    decode: Callable[[Any], T]


# -- runners ----------------------------------------------------------------------------------


class Scripts:
    """The scripts registered on a sync client (Redis or RedisCluster)."""

    def __init__(
        self, client: Any, names: Iterable[str] = NAMES, spin_us: int = DEFAULT_SPIN_US
    ) -> None:
        """`spin_us`: how long a call polls for its reply before sleeping (zsched/store/direct.py)."""
        self._client = client
        self._scripts = {n: client.register_script(source(n)) for n in names}
        # The direct path serves a plain client (one server or Sentinel's master), whose
        # commands all go to one pool; a cluster client routes by slot and keeps its own path.
        plain = isinstance(client, redis.Redis) and getattr(client, "connection", None) is None
        self._direct = DirectConnections(client.connection_pool, spin_us) if plain else None

    def add(self, name: str) -> None:
        """Register one more script by name (extensions such as rules)."""
        self._scripts[name] = self._client.register_script(source(name))

    def close(self) -> None:
        """Close the connections of the direct path (the client's pool is the caller's)."""
        if self._direct is not None:
            self._direct.close()

    def run(self, call: Call[T]) -> T:
        """Run `call` and decode its reply."""
        script = self._scripts[call.name]
        if self._direct is not None:
            reply = self._direct.evalsha(script.sha, call.keys, call.args)
            if reply is not FALLBACK:
                return call.decode(reply)
        return call.decode(script(keys=call.keys, args=call.args))

    def run_many(self, calls: list[Call[Any]]) -> list[Any]:
        """Run `calls` of one script, in order, streamed on one connection (or one pipeline);
        their decoded replies. The first error reply is raised once every call has answered."""
        script = self._scripts[calls[0].name]
        replies: Any = FALLBACK
        if self._direct is not None:
            replies = self._direct.evalsha_many(script.sha, [(c.keys, c.args) for c in calls])
        if replies is FALLBACK:
            pipe = self._client.pipeline(transaction=False)
            for c in calls:
                self.queue(c, pipe)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for c, r in zip(calls, replies, strict=True):
            if isinstance(r, redis.exceptions.NoScriptError):  # not run: load it, run it now
                r = script(keys=c.keys, args=c.args)
            out.append(r)
        for r in out:
            if isinstance(r, Exception):
                raise r
        return [c.decode(r) for c, r in zip(calls, out, strict=True)]

    def queue(self, call: Call[Any], pipe: Any) -> None:
        """Queue `call` on a pipeline; decode its reply from `execute()` with `call.decode`."""
        self._scripts[call.name](keys=call.keys, args=call.args, client=pipe)


class AsyncScripts:
    """The scripts registered on an asyncio client."""

    def __init__(self, client: Any, names: Iterable[str] = NAMES) -> None:
        self._client = client
        self._scripts = {n: client.register_script(source(n)) for n in names}

    def add(self, name: str) -> None:
        self._scripts[name] = self._client.register_script(source(name))

    async def run(self, call: Call[T]) -> T:
        script = self._scripts[call.name]
        return call.decode(await script(keys=call.keys, args=call.args))

    async def queue(self, call: Call[Any], pipe: Any) -> None:
        """Queue `call` on an asyncio pipeline (its script is loaded before the pipeline runs)."""
        await self._scripts[call.name](keys=call.keys, args=call.args, client=pipe)

    async def run_many(self, calls: list[Call[Any]]) -> list[Any]:
        """Run `calls` in one pipeline (one round trip), in order; their decoded replies. The
        first error reply is raised once every call has answered. Not on a cluster client."""
        pipe = self._client.pipeline(transaction=False)
        for c in calls:
            await self.queue(c, pipe)
        replies = await pipe.execute(raise_on_error=False)
        for r in replies:
            if isinstance(r, Exception):
                raise r
        return [c.decode(r) for c, r in zip(calls, replies, strict=True)]
