"""Redis clients from URLs, with the protocol pinned and secrets kept out of messages.

Every client speaks RESP2 (protocol=2) so reply shapes are the ones the wrappers decode, and
returns bytes (payloads are binary).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis

from .errors import ConfigError

_SCHEMES = ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """The URL with any password replaced by '***', safe for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable redis url>"
    if parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    netloc = f"{user}:***@{host}" if user else f"***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redact_text(text: str) -> str:
    """Remove credentials from any text that may contain a Redis URL."""
    return re.sub(r"(rediss?|unix)://[^@\s/]*@", r"\1://***@", text)


def _check(url: str) -> None:
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in _SCHEMES:
        raise ConfigError(
            f"unsupported Redis URL scheme {scheme!r} in {redact(url)}; "
            f"use one of {', '.join(s + '://' for s in _SCHEMES)}"
        )


COMMON: dict[str, Any] = {"protocol": 2, "decode_responses": False, "health_check_interval": 30}


def sync_client(url: str, **kw: Any) -> redis.Redis:
    """A sync client for `url`."""
    _check(url)
    return redis.Redis.from_url(url, **{**COMMON, **kw})


def async_client(url: str, **kw: Any) -> aioredis.Redis:
    """An asyncio client for `url`."""
    _check(url)
    return aioredis.Redis.from_url(url, **{**COMMON, **kw})


def async_from_sync(client: Any, **kw: Any) -> aioredis.Redis:
    """An asyncio client reaching the same server as a sync redis-py client."""
    kwargs = dict(client.connection_pool.connection_kwargs)
    conn_cls = client.connection_pool.connection_class
    kwargs.pop("connection_class", None)
    kwargs.update(COMMON)
    kwargs.update(kw)
    if "SSL" in conn_cls.__name__:
        kwargs["ssl"] = True
    if "Unix" in conn_cls.__name__:
        return aioredis.Redis(unix_socket_path=kwargs.pop("path"), **kwargs)
    return aioredis.Redis(**kwargs)
