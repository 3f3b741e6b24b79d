"""The bare minimum: only the design's Redis operations, hand-written, no library.

Enqueue: HSET (envelope) + ZADD (due time), pipelined. Consumer (one process): a Lua call
that moves up to C due runs onto a stream, XREADGROUP COUNT C, one XACK per batch, C = 100
(its tuned setting) or the equal-settings concurrency: at most C runs held at once. No
fencing, dedupe, retries, metrics or recovery: the cost floor of this design in Python.
With an io workload's handler (bench/handler.py) the batch's handlers run at once (awaited
together on one event loop, or in a pool of C threads) and the batch is acked when all
returned: the simplest consumer, a barrier per batch.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgpack
import redis

from .. import handler
from ..common import ROOT, Proc
from ..contender import Item, py_module
from ..reporter import Reporter, exit_on_sigterm

DISPATCH = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('XADD', KEYS[3], '*', 'id', id, 'env', redis.call('HGET', KEYS[2], id))
end
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
  redis.call('HDEL', KEYS[2], unpack(due))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, head[2] or -1}
"""


def keys(queue: str) -> tuple[str, str, str]:
    return f"bare:{{{queue}}}:delayed", f"bare:{{{queue}}}:runs", f"bare:{{{queue}}}:ready"


class Bare:
    name = "bare"
    has_batch = True

    def __init__(self, concurrency: int | None = None) -> None:
        self.concurrency = concurrency or 100
        c = self.concurrency
        self.config = (
            f"1 process: Lua dispatch of {c} per call, XREADGROUP COUNT {c}, XACK per batch; "
            f"in flight at most {c} (one batch, read after the last is acked), no prefetch"
        )
        self.r: redis.Redis | None = None
        self.k = ("", "", "")

    def open(self, url: str, queue: str) -> None:
        self.r = redis.Redis.from_url(url, protocol=2)
        self.k = keys(queue)

    def _add(self, pipe: Any, due_ms: int, payload: dict[str, Any]) -> None:
        rid = uuid.uuid4().hex[:16]
        pipe.hset(self.k[1], rid, msgpack.packb(payload))
        pipe.zadd(self.k[0], {rid: due_ms})

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        assert self.r is not None
        pipe = self.r.pipeline(transaction=False)
        self._add(pipe, due_ms, payload)
        pipe.execute()

    def enqueue_many(self, items: list[Item]) -> None:
        assert self.r is not None
        for i in range(0, len(items), 1000):
            pipe = self.r.pipeline(transaction=False)
            for due, p in items[i : i + 1000]:
                self._add(pipe, due, p)
            pipe.execute()

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        extra = [str(lags)] if lags else []
        return [
            Proc(
                py_module("bench.peers.bare", url, queue, str(self.concurrency), *extra),
                cwd=str(ROOT),
            )
            for _ in range(workers)
        ]

    def close(self) -> None:
        if self.r is not None:
            self.r.close()
            self.r = None


def _handle(rep: Reporter, count: int) -> Callable[[list[Any]], None] | None:
    """The batch's handler calls, each io wait at once; None for the no-op (called inline
    as each entry is decoded, as before the io workloads)."""
    kind, wait_s = handler.spec()
    if not wait_s:
        return None
    if kind == "sync":
        pool = ThreadPoolExecutor(count)

        def blocking(p: Any) -> None:
            rep.hit(p)
            time.sleep(wait_s)

        def threads(payloads: list[Any]) -> None:
            list(pool.map(blocking, payloads))

        return threads
    loop = asyncio.new_event_loop()

    async def waiting(p: Any) -> None:
        rep.hit(p)
        await asyncio.sleep(wait_s)

    async def batch(payloads: list[Any]) -> None:
        await asyncio.gather(*(waiting(p) for p in payloads))

    return lambda payloads: loop.run_until_complete(batch(payloads))


def main() -> None:
    url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rep = Reporter(sys.argv[4] if len(sys.argv) > 4 else None)
    exit_on_sigterm()
    r = redis.Redis.from_url(url, protocol=2)
    delayed, runs, ready = keys(queue)
    try:
        r.xgroup_create(ready, "g", id="0", mkstream=True)
    except redis.ResponseError:
        pass
    dispatch = r.register_script(DISPATCH)
    handle = _handle(rep, count)
    rep.ready()
    while True:
        now = int(time.time() * 1000)
        moved, head = dispatch(keys=[delayed, runs, ready], args=[now, count])
        head = int(head)
        resp = r.xreadgroup("g", "c", {ready: ">"}, count=count)
        ids, payloads = [], []
        for _stream, entries in resp or []:
            for eid, fields in entries:
                if handle is None:
                    rep.hit(msgpack.unpackb(fields[b"env"]))
                else:
                    payloads.append(msgpack.unpackb(fields[b"env"]))
                ids.append(eid)
        if ids:
            if handle is not None:
                handle(payloads)
            r.xack(ready, "g", *ids)
        elif not moved:
            # The bare minimum polls: every 50 ms, or at the next due time if sooner.
            wait = 0.05 if head < 0 else min(0.05, max(0.0, (head - now) / 1000))
            time.sleep(wait)


if __name__ == "__main__":
    main()
