"""Running batches of enqueue calls on any deployment, optionally waiting for a replica.

Redis replicates asynchronously: a master that dies right after acknowledging a write may take
the write with it, and the replica promoted in its place never saw it. With `durable=True` an
App sends `WAIT 1 <timeout>` after its enqueue scripts **on the same connection**, so WAIT
covers exactly those writes, and reports success only once a replica holds them; otherwise it
raises NotReplicated (the run may or may not survive a failover; enqueueing it again with the
same run id is safe, a duplicate is detected).

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
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex

from . import scripts as S
from .connection import is_cluster
from .errors import NotReplicated

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger(__name__)
#: Redirect retries of one node group before the MOVED error is raised to the caller.
MOVED_RETRIES = 3


def run_calls(app: App, calls: list[S.Call[Any]]) -> list[Any]:
    """Run `calls` (in any order) and return their decoded replies in the order given."""
    if not calls:
        return []
    if is_cluster(app.redis) and (app.durable or len(calls) > 1):
        return _per_node(app, calls)
    if not app.durable and len(calls) == 1:
        return [app.scripts.run(calls[0])]
    if not app.durable and len({c.name for c in calls}) == 1:
        return app.scripts.run_many(calls)
    pipe = app.redis.pipeline(transaction=False)
    replies = _send(app, pipe, calls)
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return [call.decode(r) for call, r in zip(calls, replies, strict=True)]


def _send(app: App, pipe: Any, calls: list[S.Call[Any]]) -> list[Any]:
    """Execute `calls` (+ WAIT when durable) on `pipe`; raw replies, errors as values."""
    for call in calls:
        app.scripts.queue(call, pipe)
    if app.durable:
        pipe.execute_command("WAIT", 1, app.durable_timeout_ms)
    return checked(app, pipe.execute(raise_on_error=False))


def checked(app: App, replies: list[Any]) -> list[Any]:
    """The replies of a pipeline of calls (+ WAIT when durable), WAIT's reply removed;
    NotReplicated if a call wrote and no replica acknowledged it (AsyncApp shares this)."""
    replies = list(replies)
    if app.durable:
        acked = replies.pop()
        # WAIT matters only if a call wrote something: when every call failed (all MOVED on a
        # master demoted to replica, where WAIT itself fails too), the caller retries them.
        wrote = any(not isinstance(r, Exception) for r in replies)
        if wrote and (isinstance(acked, Exception) or int(acked) < 1):
            # Raise a script's own error first: it says more than the missing acknowledgement.
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            cause = acked if isinstance(acked, Exception) else None
            raise NotReplicated(_message(app)) from cause
    return replies


def _per_node(app: App, calls: list[S.Call[Any]]) -> list[Any]:
    rc = app.redis
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
                replies = _send(app, pipe, [calls[i] for i in idx])
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


def _message(app: App) -> str:
    return (
        f"enqueue in queue {app.queue!r} was written on the master but no replica acknowledged "
        f"it within {app.durable_timeout_ms} ms; it may be lost if the master fails now. "
        f"Enqueueing the same run ids again is safe (duplicates are detected)"
    )
