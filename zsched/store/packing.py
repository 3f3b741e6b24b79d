"""Commands packed in C for asyncio connections, as redis-py's sync client already packs them.

redis-py's asyncio connection packs every command in Python, argument by argument (an
encoder call and a join each, ~2 us an argument here). ack's 200 arguments a call made it
14 % of the worker's instructions per run at the CLI defaults (BENCHMARKS.md, session 15).
hiredis packs the same bytes in one C call. Anything it refuses (a bool, None, a bytearray:
redis-py's own errors), another encoding than UTF-8 strict, a first argument holding words
('CONFIG GET', which redis-py splits) and a memoryview that is not C-contiguous (hiredis
ignores its stride and would send other bytes) go redis-py's way.
"""

from __future__ import annotations

from typing import Any

_pack: Any
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is a dependency; without it redis-py packs
    _pack = None

_UTF8 = ("utf-8", "utf8")


class CPacked:
    """A mixin before an asyncio Connection class: pack_command by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        enc = self.encoder  # type: ignore[attr-defined]
        first = args[0] if args else None
        plain = (isinstance(first, str) and " " not in first) or (
            isinstance(first, bytes) and b" " not in first
        )
        if (
            _pack is not None
            and plain
            and enc.encoding.lower() in _UTF8
            and enc.encoding_errors == "strict"
            and (memoryview not in map(type, args) or _contiguous(args))
        ):
            try:
                return [_pack(args)]
            except TypeError:
                pass
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]


def _contiguous(args: tuple[Any, ...]) -> bool:
    """Every memoryview among `args` is C-contiguous (a strided view, e.g. `mv[::2]`, is not)."""
    return all(a.c_contiguous for a in args if type(a) is memoryview)


_CLASSES: dict[type, type] = {}


def c_packed(cls: type) -> type:
    """`cls` with CPacked first (one class per class, made once)."""
    if issubclass(cls, CPacked):
        return cls
    made = _CLASSES.get(cls)
    if made is None:
        made = _CLASSES[cls] = type(cls.__name__, (CPacked, cls), {"__module__": cls.__module__})
    return made


def pack_in_c(client: Any) -> Any:
    """Make the asyncio `client`'s future connections pack in C; returns it. A plain or
    Sentinel-managed client's pool, a cluster client's nodes (those known and those it finds)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_class"):
        pool.connection_class = c_packed(pool.connection_class)
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        kwargs = getattr(manager, "connection_kwargs", None)
        if isinstance(kwargs, dict) and "connection_class" in kwargs:
            kwargs["connection_class"] = c_packed(kwargs["connection_class"])
        for node in list(getattr(manager, "startup_nodes", {}).values()):
            if hasattr(node, "connection_class"):
                node.connection_class = c_packed(node.connection_class)
    return client
