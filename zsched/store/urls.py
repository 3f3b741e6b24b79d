"""Redis URLs: their schemes, the parsed form of cluster and Sentinel URLs, and redaction.

Pure text work, no client: zsched/store/connection.py turns a URL into a client, and logs,
errors and the console show a URL or a message only through `redact` / `redact_text`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from zsched.errors import ConfigError

#: The schemes of one server (redis-py's own URL syntax); the others are zsched's.
PLAIN = ("redis", "rediss", "unix")
_CLUSTER = ("redis+cluster", "rediss+cluster")
_SENTINEL = ("redis+sentinel", "rediss+sentinel")
_SCHEMES = PLAIN + _CLUSTER + _SENTINEL


def redact(url: str) -> str:
    """The URL with any password replaced by '***', safe for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable redis url>"
    query = _PASSWORD_OPTION.sub(r"\1***", parts.query)
    netloc = parts.netloc
    if "@" in netloc:
        user = netloc.rsplit("@", 1)[0].split(":", 1)[0]
        host = netloc.rsplit("@", 1)[-1]
        netloc = f"{user}:***@{host}" if user else f"***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


# A URL option that carries a secret (password=, sentinel_password= ...), up to & or a space.
_PASSWORD_OPTION = re.compile(r"((?:^|(?<=[?&]))\w*password=)[^&\s'\"]*", re.I)


def redact_text(text: str) -> str:
    """Remove credentials from any text that may contain a Redis URL: the user:password part
    and any *password= option."""
    text = re.sub(r"((?:rediss?|unix)(?:\+cluster|\+sentinel)?)://[^@\s/]*@", r"\1://***@", text)
    return _PASSWORD_OPTION.sub(r"\1***", text)


def scheme_of(url: str) -> str:
    """The URL's scheme (`redis+cluster`, ...), or "" when it has none."""
    return url.split("://", 1)[0] if "://" in url else ""


def check(url: str) -> None:
    """ConfigError unless the URL has a scheme zsched can connect to."""
    if scheme_of(url) not in _SCHEMES:
        raise ConfigError(
            f"unsupported Redis URL scheme {scheme_of(url)!r} in {redact(url)}; "
            f"use one of {', '.join(s + '://' for s in _SCHEMES)}"
        )


_FLOAT_OPTIONS = ("socket_timeout", "socket_connect_timeout")


@dataclass(frozen=True)
class Target:
    """A parsed cluster or Sentinel URL."""

    kind: str  # "cluster" or "sentinel"
    nodes: list[tuple[str, int]]
    service: str | None = None
    db: int = 0
    ssl: bool = False
    auth: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    sentinel_password: str | None = None


def parse(url: str) -> Target:
    """Parse a ``redis+cluster://`` or ``redis+sentinel://`` URL (ConfigError if bad)."""
    check(url)
    scheme = scheme_of(url)
    if scheme in PLAIN:
        raise ConfigError(f"{redact(url)} names a single server, not a cluster or Sentinel")
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    auth: dict[str, str] = {}
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        if user:
            auth["username"] = unquote(user)
        if password:
            auth["password"] = unquote(password)
    nodes = [_host_port(hp, url) for hp in netloc.split(",") if hp]
    if not nodes:
        raise ConfigError(f"{redact(url)} names no host:port")
    kind = "cluster" if scheme in _CLUSTER else "sentinel"
    segments = [s for s in path.split("/") if s]
    service, db = None, 0
    if kind == "sentinel":
        if not segments:
            raise ConfigError(f"{redact(url)} needs the Sentinel service name: .../service_name")
        service, segments = unquote(segments[0]), segments[1:]
    if segments:
        db = _int(segments[0], "database number", url)
        if len(segments) > 1 or (kind == "cluster" and db != 0):
            raise ConfigError(f"bad path in {redact(url)}: a cluster has only database 0")
    options, sentinel_password = _options(query, kind, url)
    return Target(kind, nodes, service, db, scheme.startswith("rediss"), auth, options,
                  sentinel_password)  # fmt: skip


def _int(text: str, what: str, url: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"bad {what} {text!r} in {redact(url)}") from None


def _host_port(hp: str, url: str) -> tuple[str, int]:
    host, sep, port = hp.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"expected host:port, got {hp!r} in {redact(url)}")
    return host.strip("[]"), _int(port, "port", url)


def _options(query: str, kind: str, url: str) -> tuple[dict[str, Any], str | None]:
    options: dict[str, Any] = {}
    sentinel_password = None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in _FLOAT_OPTIONS:
            try:
                options[name] = float(value)
            except ValueError:
                raise ConfigError(f"option {name} must be seconds, got {value!r}") from None
        elif name == "sentinel_password" and kind == "sentinel":
            sentinel_password = value
        else:
            known = ", ".join(
                _FLOAT_OPTIONS + (("sentinel_password",) if kind == "sentinel" else ())
            )
            raise ConfigError(f"unknown option {name!r} in {redact(url)}; known: {known}")
    return options, sentinel_password
