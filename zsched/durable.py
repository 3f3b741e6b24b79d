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
  WAIT, in a plain pipeline on a connection to that master. A MOVED reply (the slot moved, e.g.
  after a failover) refreshes the slot map and retries the group; scripts are idempotent by run
  id, so a retried enqueue never adds a run twice.
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
    durable = app.durable
    if not durable and len(calls) == 1:
        return [app.scripts.run(calls[0])]
    if not is_cluster(app.redis):
        return _pipelined(app, app.redis, calls, durable)
    if not durable:
        # A cluster pipeline refuses scripts: one call at a time (each moves up to 1000 runs),
        # through the cluster client, which follows redirects itself.
        return [app.scripts.run(c) for c in calls]
    return _per_node(app, calls)


def _pipelined(app: App, client: Any, calls: list[S.Call[Any]], durable: bool) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        app.scripts.queue(call, pipe)
    if durable:
        pipe.execute_command("WAIT", 1, app.durable_timeout_ms)
    replies = pipe.execute()
    out = [call.decode(reply) for call, reply in zip(calls, replies, strict=False)]
    if durable and int(replies[-1]) < 1:
        raise NotReplicated(_message(app, calls))
    return out


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
            try:
                replies = _pipelined(app, rc.get_redis_connection(node), [calls[i] for i in idx],
                                     durable=True)  # fmt: skip
            except (rex.MovedError, rex.AskError):
                if attempt == MOVED_RETRIES:
                    raise
                pending.extend(idx)
                continue
            except rex.ConnectionError:
                # The node is gone: learn the new slot owners for the caller's next attempt.
                _refresh(rc)
                raise
            for i, reply in zip(idx, replies, strict=True):
                out[i] = reply
        if not pending:
            return out
        log.info("slots moved during a durable enqueue; refreshing the slot map and retrying")
        _refresh(rc)
    raise AssertionError("unreachable")  # pragma: no cover


def _refresh(rc: Any) -> None:
    try:
        rc.nodes_manager.initialize()
    except (rex.RedisError, rex.RedisClusterException) as exc:
        log.warning("could not refresh the cluster slot map: %s", exc)


def _message(app: App, calls: list[S.Call[Any]]) -> str:
    return (
        f"enqueue in queue {app.queue!r} was written on the master but no replica acknowledged "
        f"it within {app.durable_timeout_ms} ms; it may be lost if the master fails now. "
        f"Enqueueing the same run ids again is safe (duplicates are detected)"
    )
