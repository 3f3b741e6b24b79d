"""Running batches of enqueue calls on any deployment, optionally waiting for a replica.

Redis replicates asynchronously: a master that dies right after acknowledging a write may take
the write with it, and the replica promoted in its place never saw it. With `durable=True` an
App sends `WAIT 1 <timeout>` after its enqueue scripts **on the same connection**, so WAIT
covers exactly those writes, and reports success only once a replica holds them; otherwise it
raises NotReplicated (the run may or may not survive a failover; enqueueing it again with the
same run id is safe, a duplicate is detected).

Levels (`App(durable=...)`): `True` or `"replica"` waits for one replica (WAIT 1);
`"fsync"` waits until the master fsynced the writes to its AOF (WAITAOF 1 0); `"replica+fsync"`
until the master and one replica fsynced them (WAITAOF 1 1). WAITAOF exists from Redis 7.2
and in Valkey; on an older server the fsync levels are refused at the first enqueue, before
anything is written (DurabilityUnsupported, naming the server's version).

- One server or Sentinel: one pipeline holds the scripts and the WAIT.
- Redis Cluster: redis-py refuses scripts in a cluster pipeline, and a WAIT sent through the
  cluster client could travel on another connection (and to another node) than the script.
  So the calls are grouped by the master that owns their slot and each group is sent, with its
  WAIT, in a plain pipeline on a connection to that master (batches are pipelined that way
  without WAIT too). A MOVED reply (the slot moved, e.g. after a failover) refreshes the slot
  map and retries that call; scripts are idempotent by run id, so a retry never adds a run
  twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import redis.exceptions as rex

from zsched.errors import DurabilityUnsupported, InvalidArgument, NotReplicated
from zsched.store import scripts as S
from zsched.store.connection import is_cluster
from zsched.store.state import StoreTarget

log = logging.getLogger(__name__)
#: Redirect retries of one node group before the MOVED error is raised to the caller.
MOVED_RETRIES = 3


#: Durability levels: what App(durable=...) accepts, and the command each one sends.
LEVELS: dict[str, tuple[str, int, int]] = {
    "replica": ("WAIT", 1, 0),  # WAIT numreplicas (the last number is not sent)
    "fsync": ("WAITAOF", 1, 0),  # WAITAOF numlocal numreplicas
    "replica+fsync": ("WAITAOF", 1, 1),
}


def level_of(durable: bool | str | None) -> str | None:
    """The level named by App's `durable` argument (None: not durable); ValueError if unknown."""
    if durable is None or durable is False:
        return None
    if durable is True:
        return "replica"
    if isinstance(durable, str) and durable in LEVELS:
        return durable
    raise InvalidArgument(
        f"durable must be False, True or one of {', '.join(map(repr, LEVELS))}, got {durable!r}",
        "durable",
    )


def check_level(target: StoreTarget) -> None:
    """Refuse an fsync level on a server without WAITAOF, once per App, before any write."""
    if (
        target.durability is None
        or LEVELS[target.durability][0] != "WAITAOF"
        or target.shared.level_checked
    ):
        return
    try:  # asks for nothing (0 local, 0 replicas), so it answers at once where it exists
        target.redis.execute_command("WAITAOF", 0, 0, 1)
    except rex.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        raise DurabilityUnsupported(
            f"durable={target.durability!r} on queue {target.queue!r} needs WAITAOF (Redis 7.2+ or "
            f"Valkey), but the server is {_server_version(target.redis)}: use durable='replica' "
            f"(WAIT), or upgrade the server"
        ) from exc
    target.shared.level_checked = True


def _server_version(client: Any) -> str:
    try:
        info = client.info("server")
    except rex.ResponseError:
        return "a server whose version INFO does not tell"
    if isinstance(info, dict) and "redis_version" not in info:  # a cluster: one dict per node
        info = next(iter(info.values()), {})
    if info.get("valkey_version"):
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"


def run_calls(target: StoreTarget, calls: list[S.Call[Any]]) -> list[Any]:
    """Run `calls` (in any order) and return their decoded replies in the order given."""
    if not calls:
        return []
    check_level(target)
    if is_cluster(target.redis) and (target.durable or len(calls) > 1):
        return _per_node(target, calls)
    if not target.durable and len(calls) == 1:
        return [target.scripts.run(calls[0])]
    if not target.durable and len({c.name for c in calls}) == 1:
        return target.scripts.run_many(calls)
    pipe = target.redis.pipeline(transaction=False)
    replies = _send(target, pipe, calls)
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return [call.decode(r) for call, r in zip(calls, replies, strict=True)]


def _send(target: StoreTarget, pipe: Any, calls: list[S.Call[Any]]) -> list[Any]:
    """Execute `calls` (+ WAIT when durable) on `pipe`; raw replies, errors as values."""
    for call in calls:
        target.scripts.queue(call, pipe)
    # A retry whose runs an earlier attempt already wrote still writes: enqueue.lua counts
    # the duplicates (HINCRBY), so WAIT covers everything the master held before, runs
    # included, and never vouches for an older write of the connection (or none).
    if target.durable:
        pipe.execute_command(*wait_command(target))
    return checked(target, pipe.execute(raise_on_error=False))


def checked(target: StoreTarget, replies: list[Any]) -> list[Any]:
    """The replies of a pipeline of calls (+ WAIT/WAITAOF when durable), its reply removed;
    NotReplicated if a call wrote and the write was not acknowledged (AsyncApp shares this)."""
    replies = list(replies)
    if target.durable:
        acked = replies.pop()
        # WAIT matters only if a call wrote something: when every call failed (all MOVED on a
        # master demoted to replica, where WAIT itself fails too), the caller retries them.
        wrote = any(not isinstance(r, Exception) for r in replies)
        if isinstance(acked, rex.ResponseError) and "appendonly" in str(acked):
            # WAITAOF on a master without an AOF: a setting to change, not a wait to retry.
            raise DurabilityUnsupported(
                f"durable={target.durability!r} on queue {target.queue!r} needs `appendonly yes` on "
                f"the master (Redis answered: {acked}); the enqueue was written, not fsynced"
            )
        if wrote and not _acknowledged(target, acked):
            # Raise a script's own error first: it says more than the missing acknowledgement.
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            cause = acked if isinstance(acked, Exception) else None
            raise NotReplicated(_message(target)) from cause
    return replies


def wait_command(target: StoreTarget) -> tuple[Any, ...]:
    cmd, first, second = LEVELS[target.durability or "replica"]
    if cmd == "WAIT":
        return (cmd, first, target.durable_timeout_ms)
    return (cmd, first, second, target.durable_timeout_ms)


def _acknowledged(target: StoreTarget, reply: Any) -> bool:
    """Whether WAIT / WAITAOF's reply meets the level: WAIT answers the replicas that hold the
    writes; WAITAOF answers [local fsynced (0|1), replicas fsynced]."""
    if isinstance(reply, Exception):
        return False
    wanted = LEVELS[target.durability or "replica"]
    if wanted[0] == "WAIT":
        return int(reply) >= 1
    local, replicas = int(reply[0]), int(reply[1])
    return local >= wanted[1] and replicas >= wanted[2]


def _per_node(target: StoreTarget, calls: list[S.Call[Any]]) -> list[Any]:
    rc = target.redis
    out: list[Any] = [None] * len(calls)
    pending = list(range(len(calls)))
    for attempt in range(MOVED_RETRIES + 1):
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in pending:
            groups[rc.get_node_from_key(calls[i].keys[0])].append(i)
        pending = []
        for node, idx in groups.items():
            pipe = rc.get_redis_connection(node).pipeline(transaction=False)
            try:
                replies = _send(target, pipe, [calls[i] for i in idx])
            except rex.ConnectionError:
                # The node is gone: learn the new slot owners for the caller's next attempt.
                _refresh(rc)
                raise
            for i, reply in zip(idx, replies, strict=True):
                if isinstance(reply, rex.MovedError | rex.AskError) and attempt < MOVED_RETRIES:
                    pending.append(i)  # only this call: the others of the group are done
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    out[i] = calls[i].decode(reply)
        if not pending:
            return out
        log.info("slots moved during an enqueue; refreshing the slot map and retrying")
        _refresh(rc)
    raise AssertionError("unreachable")  # pragma: no cover


def _refresh(rc: Any) -> None:
    try:
        rc.nodes_manager.initialize()
    except (rex.RedisError, rex.RedisClusterException) as exc:
        log.warning("could not refresh the cluster slot map: %s", exc)


_NOT_YET = {
    "replica": "no replica acknowledged it",
    "fsync": "the master did not fsync it to its append-only file",
    "replica+fsync": "the master and a replica did not both fsync it to their append-only files",
}


def _message(target: StoreTarget) -> str:
    return (
        f"enqueue in queue {target.queue!r} was written on the master but "
        f"{_NOT_YET[target.durability or 'replica']} within {target.durable_timeout_ms} ms; it may be "
        f"lost if the master fails now. Enqueueing the same run ids again is safe (duplicates "
        f"are detected)"
    )
