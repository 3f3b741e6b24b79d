"""Noticing that Redis lost a queue's data: a restart without persistence, or a flush.

Redis answers as usual after such a loss, so nothing else would say that every delayed run
vanished. Each dispatcher keeps the queue's `epoch` marker (a random token, set once with
SET NX) and the server's INFO `run_id`. When the marker it saw is gone or replaced, it logs
an ERROR naming the queue; a restart that kept the data is only an INFO line. INFO is
optional (fakeredis has none): the marker alone decides.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import redis.exceptions

from zsched.protocol.keys import QueueKeys

log = logging.getLogger("zsched.dispatch.dispatcher")
#: Least seconds between two reads of the server's run_id (a restart that kept the data is
#: logged this late at most; a loss is noticed at the next check whatever this is).
RUN_ID_EVERY_S = 300.0


class DataWatch:
    """Checks, at most every `every_s`, that the queue's marker is the one seen before."""

    def __init__(self, redis: Any, keys: QueueKeys, queue: str, every_s: float = 5.0) -> None:
        self.redis, self.keys, self.queue, self.every_s = redis, keys, queue, every_s
        self.token: bytes | None = None
        self.run_id: str | None = None
        self._next = 0.0
        # INFO server (the run_id) only tells a restart that kept the data from none, so it is
        # read every RUN_ID_EVERY_S, and at once when the marker changed: an idle dispatcher
        # checks every pass, and INFO there was 0.03 of the ~1 command a second it may cost.
        self._next_run_id = 0.0

    async def check(self, force: bool = False) -> bool:
        """True when the data vanished since the last check (and that was logged)."""
        now = time.monotonic()
        if not force and now < self._next:
            return False
        self._next = now + self.every_s
        token = await self._marker()
        lost = self.token is not None and token != self.token
        read_id = lost or force or now >= self._next_run_id  # force: after a reconnect
        run_id = await self._server_run_id() if read_id else None
        if read_id:
            self._next_run_id = now + RUN_ID_EVERY_S
        restarted = bool(self.run_id and run_id and run_id != self.run_id)
        if lost:
            how = f" (server restarted: run_id {self.run_id} -> {run_id})" if restarted else ""
            log.error(
                "Redis lost the data of queue %s%s: its marker key is gone. Runs, rules and "
                "history stored before are lost. Cause: a restart without persistence "
                "(enable appendonly), FLUSHALL/FLUSHDB, or a failover to an empty replica.",
                self.queue, how, extra={"queue": self.queue},
            )  # fmt: skip
        elif restarted:
            log.info("Redis server restarted (run_id %s -> %s); queue %s data intact",
                     self.run_id, run_id, self.queue, extra={"queue": self.queue})  # fmt: skip
        self.token, self.run_id = token, run_id or self.run_id
        return lost

    async def _marker(self) -> bytes:
        """The queue's marker, set first if missing: one SET NX GET (Redis >= 7.0), else SET NX
        and GET (an idle dispatcher checks every pass: one command a pass less)."""
        mine = secrets.token_hex(8)
        try:
            old = await self.redis.set(self.keys.epoch, mine, nx=True, get=True)
        except redis.exceptions.ResponseError:  # Redis < 7.0 refuses NX with GET
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(self.keys.epoch, mine, nx=True)
            pipe.get(self.keys.epoch)
            _, old = await pipe.execute()
        token = mine if old is None else old
        return token.encode() if isinstance(token, str) else bytes(token)

    async def _server_run_id(self) -> str | None:
        try:
            info = await self.redis.info("server")
        except (redis.exceptions.ResponseError, NotImplementedError, AttributeError, TypeError):
            return None  # fakeredis, or a proxy that hides INFO: the marker still works
        if isinstance(info, dict) and isinstance(info.get("run_id"), str):
            return str(info["run_id"])
        return None
