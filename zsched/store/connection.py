"""Redis clients from URLs, with the protocol pinned and secrets kept out of messages.

Every client speaks RESP2 (protocol=2) so reply shapes are the ones the wrappers decode, and
returns bytes (payloads are binary). Cluster and Sentinel clients answer the same commands
with the same replies as a plain client. Three kinds of deployment, one URL each:

- ``redis://``, ``rediss://``, ``unix://``: one server (redis-py's own URL syntax);
- ``redis+cluster://[user:pass@]host:port,host:port,...[?options]``: Redis Cluster; any
  reachable node is enough to discover the others;
- ``redis+sentinel://[user:pass@]host:port,host:port,.../service_name[/db][?options]``: the
  master Sentinel names `service_name`; clients follow a failover to the new master.

The ``rediss+`` forms use TLS. Options: ``socket_timeout``, ``socket_connect_timeout``
(seconds) and, for Sentinel, ``sentinel_password``. An unknown option is a ConfigError.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.sentinel as aiosentinel
import redis.cluster
import redis.exceptions as rex
import redis.sentinel

from zsched.errors import ConfigError
from zsched.store.packing import pack_in_c
from zsched.store.sentinel_watch import MasterWatch
from zsched.store.urls import PLAIN, Target, check, parse, scheme_of
from zsched.store.urls import redact as redact  # re-exported: callers import it from here
from zsched.store.urls import redact_text as redact_text

# redis-py leaves these untyped; calling them through Any keeps `mypy --strict` quiet.
_SyncNode: Any = redis.cluster.ClusterNode
_SyncSentinel: Any = redis.sentinel.Sentinel
_AsyncNode: Any = aiocluster.ClusterNode
_AsyncSentinel: Any = aiosentinel.Sentinel


#: Errors a long-running loop waits out (with backoff) instead of crashing: a lost connection,
#: a cluster failover in progress (CLUSTERDOWN, TRYAGAIN, an uncovered slot, "TTL exhausted"
#: after too many redirects), and a write sent to a master that was just demoted (READONLY;
#: the Sentinel pool turns it into a ConnectionError, a direct client sees it as is).
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ReadOnlyError,
    rex.ClusterError,
    rex.TryAgainError,
    rex.SlotNotCoveredError,
    rex.RedisClusterException,  # "Redis Cluster cannot be connected": not a RedisError
)


def _lost(exc: AttributeError) -> rex.ConnectionError | None:
    # redis-py 8.1, asyncio cluster: when a node fails, the client disconnects the node's idle
    # connections while another coroutine may be taking one of them; that coroutine's send
    # then fails with "'NoneType' object has no attribute 'writelines'" (its writer is gone).
    # It is a lost connection: report it as one, so retry policies apply.
    if "'NoneType' object has no attribute" not in str(exc):
        return None
    return rex.ConnectionError(f"connection closed under a command during a failover ({exc})")


class _ClusterPipeline(aiocluster.ClusterPipeline):
    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute(*args, **kwargs)
        except AttributeError as exc:
            lost = _lost(exc)
            if lost is None:
                raise
            raise lost from exc


class _AsyncCluster(aiocluster.RedisCluster):
    """redis-py's asyncio RedisCluster, with its failover race reported as a ConnectionError."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            lost = _lost(exc)
            if lost is None:
                raise
            raise lost from exc

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        if shard_hint:
            return super().pipeline(transaction, shard_hint)  # redis-py refuses it
        return _ClusterPipeline(self, transaction)  # type: ignore[abstract]

    async def _determine_slot(self, command: str, *args: Any) -> int:
        # XREADGROUP/XREAD have "movable keys": redis-py asks a node (COMMAND GETKEYS) where
        # each call goes, a round trip before every worker read. Their keys follow STREAMS.
        if command.upper() in ("XREADGROUP", "XREAD"):
            slot = _stream_read_slot(self, args)
            if slot is not None:
                return slot
        return int(await super()._determine_slot(command, *args))


def _stream_read_slot(client: Any, args: tuple[Any, ...]) -> int | None:
    """The slot of an XREADGROUP/XREAD's streams (None: let redis-py work it out)."""
    words = [a.decode("latin-1") if isinstance(a, bytes) else a for a in args]
    upper = [w.upper() if isinstance(w, str) else w for w in words]
    if "STREAMS" not in upper:
        return None
    rest = args[upper.index("STREAMS") + 1 :]
    keys = rest[: len(rest) // 2]
    slots = {client.keyslot(k) for k in keys}
    return slots.pop() if len(slots) == 1 else None


class _SyncSentinelMaster(redis.Redis):
    """The master's client; closing it also closes its connections to the Sentinels and stops
    its MasterWatch (zsched/store/sentinel_watch.py)."""

    master_watch: MasterWatch | None = None

    def close(self) -> None:
        if self.master_watch is not None:
            self.master_watch.close()
        super().close()
        pool: Any = self.connection_pool
        for sentinel in pool.sentinel_manager.sentinels:
            sentinel.close()


class _AsyncSentinelMaster(aioredis.Redis):
    """The master's client; closing it also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool: Any = self.connection_pool
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


COMMON: dict[str, Any] = {"protocol": 2, "decode_responses": False, "health_check_interval": 30}


def _node_kwargs(t: Target, kw: dict[str, Any]) -> dict[str, Any]:
    out = {**COMMON, **t.auth, **t.options, **kw}
    if t.ssl:
        out["ssl"] = True
    return out


def _sentinel_kwargs(t: Target) -> dict[str, Any]:
    # Sentinels answer small commands: a short timeout keeps a dead Sentinel from stalling
    # the discovery of the master through the others.
    out: dict[str, Any] = {"protocol": 2, "socket_timeout": 1.0, "socket_connect_timeout": 1.0}
    if t.sentinel_password:
        out["password"] = t.sentinel_password
    if t.ssl:
        out["ssl"] = True
    return out


def sync_client(url: str, **kw: Any) -> Any:
    """A sync client for `url`: Redis, RedisCluster, or a Sentinel-managed master client."""
    check(url)
    if scheme_of(url) in PLAIN:
        return redis.Redis.from_url(url, **{**COMMON, **kw})
    t = parse(url)
    if t.kind == "cluster":
        nodes = [_SyncNode(h, p) for h, p in t.nodes]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **_node_kwargs(t, kw))
    assert t.service is not None
    sentinel = _SyncSentinel(t.nodes, sentinel_kwargs=_sentinel_kwargs(t))
    client = sentinel.master_for(
        t.service, redis_class=_SyncSentinelMaster, db=t.db, **_node_kwargs(t, kw)
    )
    client.master_watch = MasterWatch(client.connection_pool)
    return client


def async_client(url: str, **kw: Any) -> Any:
    """An asyncio client for `url` (same kinds as `sync_client`), packing commands in C
    (zsched/store/packing.py)."""
    check(url)
    if scheme_of(url) in PLAIN:
        return pack_in_c(aioredis.Redis.from_url(url, **{**COMMON, **kw}))
    t = parse(url)
    if t.kind == "cluster":
        nodes = [_AsyncNode(h, p) for h, p in t.nodes]
        return pack_in_c(_AsyncCluster(startup_nodes=nodes, **_node_kwargs(t, kw)))
    assert t.service is not None
    sentinel = _AsyncSentinel(t.nodes, sentinel_kwargs=_sentinel_kwargs(t))
    return pack_in_c(
        sentinel.master_for(
            t.service, redis_class=_AsyncSentinelMaster, db=t.db, **_node_kwargs(t, kw)
        )
    )


def is_cluster(client: Any) -> bool:
    """True for a (sync or asyncio) RedisCluster client."""
    return isinstance(client, redis.cluster.RedisCluster | aiocluster.RedisCluster)


_PORTABLE = frozenset({
    "host", "port", "db", "path", "username", "password", "credential_provider", "client_name",
    "socket_timeout", "socket_connect_timeout", "socket_keepalive", "ssl_keyfile",
    "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname",
})  # fmt: skip
#: What a Sentinel connection may carry over to asyncio (zsched's _sentinel_kwargs, a user's).
_SENTINEL_PORTABLE = _PORTABLE | {"protocol", "ssl"}


async def ensure_ready(client: Any) -> None:
    """Load an asyncio cluster client's slot map (a no-op for other clients and after the first
    call). redis-py does this on the first command, but a pub/sub subscription needs it before."""
    if isinstance(client, aiocluster.RedisCluster):
        await client.initialize()


def open_pubsub(client: Any) -> Any:
    """A pub/sub object for `client`: its own on one server or Sentinel; on a cluster, a
    `ClusterSubscriber`, which talks to the channel's node over a connection of its own."""
    if isinstance(client, aiocluster.RedisCluster):
        return ClusterSubscriber(client)
    return client.pubsub()


class ClusterSubscriber:
    """Subscribes, through a plain client of its own, on the node that owns the channel's slot.

    redis-py's cluster pub/sub borrows a connection from the node's shared pool; when the node
    fails, the client disconnects that pool while the subscriber reconnects, which breaks with
    an AttributeError instead of a ConnectionError. A separate client fails cleanly, and the
    caller's retry opens a new subscriber on whichever node owns the slot by then. (A classic
    PUBLISH reaches every node of a cluster, so any live node would do.)
    """

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self._client: Any = None
        self._pubsub: Any = None

    async def subscribe(self, *channels: str) -> None:
        await ensure_ready(self._cluster)
        node = self._cluster.get_node_from_key(channels[0])
        kw = {k: v for k, v in self._cluster.nodes_manager.connection_kwargs.items()
              if k in _CONNECTION_KEYS}  # fmt: skip
        self._client = aioredis.Redis(host=node.host, port=node.port, **{**kw, **COMMON})
        self._pubsub = self._client.pubsub()
        try:
            await self._pubsub.subscribe(*channels)
        except RETRYABLE_ERRORS:
            # The node may be gone: learn the new owner before the caller retries.
            self._cluster._initialize = True  # noqa: SLF001 - what redis-py does itself
            raise

    async def get_message(self, **kw: Any) -> Any:
        return await self._pubsub.get_message(**kw)

    async def aclose(self) -> None:
        if self._pubsub is not None:
            await self._pubsub.aclose()
        if self._client is not None:
            await self._client.aclose()


def async_from_sync(client: Any, **kw: Any) -> Any:
    """An asyncio client reaching the same server(s) as a sync redis-py client, packing
    commands in C (zsched/store/packing.py)."""
    return pack_in_c(_async_from_sync(client, kw))


def _async_from_sync(client: Any, kw: dict[str, Any]) -> Any:
    if isinstance(client, redis.cluster.RedisCluster):
        return _async_cluster_from_sync(client, kw)
    pool = client.connection_pool
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return _async_sentinel_from_sync(pool, kw)
    # Only where and how to connect: redis-py 8 adds pool-only settings asyncio refuses.
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _PORTABLE}
    conn_cls = pool.connection_class
    kwargs.update(COMMON)
    kwargs.update(kw)
    if "SSL" in conn_cls.__name__:
        kwargs["ssl"] = True
    if "Unix" in conn_cls.__name__:
        return aioredis.Redis(unix_socket_path=kwargs.pop("path"), **kwargs)
    return aioredis.Redis(**kwargs)


_CONNECTION_KEYS = ("username", "password", "ssl", "socket_timeout", "socket_connect_timeout")


def _async_cluster_from_sync(client: Any, kw: dict[str, Any]) -> Any:
    nm = client.nodes_manager
    known = list(nm.nodes_cache.values()) or list(nm.startup_nodes.values())
    nodes = [_AsyncNode(n.host, n.port) for n in known]
    base = {k: v for k, v in nm.connection_kwargs.items() if k in _CONNECTION_KEYS}
    return _AsyncCluster(startup_nodes=nodes, **{**base, **COMMON, **kw})


def _async_sentinel_from_sync(pool: Any, kw: dict[str, Any]) -> Any:
    manager = pool.sentinel_manager
    addrs = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    base = {k: v for k, v in pool.connection_kwargs.items() if k in (*_CONNECTION_KEYS, "db")}
    if "SSL" in pool.connection_class.__name__:
        base["ssl"] = True
    # Where and how to connect only, as for a plain client: redis-py 8.2 also puts a sync
    # Retry there, which an asyncio client converts with a UserWarning.
    skw = {k: v for k, v in manager.sentinel_kwargs.items() if k in _SENTINEL_PORTABLE}
    sentinel = _AsyncSentinel(addrs, sentinel_kwargs=skw)
    return sentinel.master_for(
        pool.service_name, redis_class=_AsyncSentinelMaster, **{**base, **COMMON, **kw}
    )


def bytes_client(redis: Any) -> Any:
    """A sync client for a URL, or the client given; refused if it decodes replies to text."""
    client = sync_client(redis) if isinstance(redis, str) else redis
    encoder = getattr(client, "get_encoder", None)
    if encoder is not None and encoder().decode_responses:
        raise ConfigError(
            "zsched needs a Redis client with decode_responses=False: envelopes are msgpack "
            "bytes, not text (pass a URL, or a client made without decode_responses)"
        )
    return client
