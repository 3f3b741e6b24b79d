"""Follow a Sentinel failover at once, not when the old master finally refuses a write.

redis-py asks Sentinel for the master when it opens a connection and keeps open connections
until they fail. After a failover that leaves the old master running (SENTINEL FAILOVER, a
network split that heals), the old master stays a writable master until Sentinel next polls
it and demotes it (~10 s); a client still connected to it writes there, and those writes are
lost when it resyncs as a replica. The graceful-failover test measured 9,114 of 10,715
acknowledged plain enqueues lost that way in one run of six.

So a sync client made from a ``redis+sentinel://`` URL watches: a daemon thread per Sentinel
subscribes to ``+switch-master`` (each Sentinel publishes it once it has the new master's
address; a thread whose Sentinel fails retries it). For its service it asks Sentinel for the
master again (`get_master_address`): redis-py then disconnects the pool's idle connections,
and drops in-use ones when they are released (a Sentinel pool owns only connections to the
current master). The direct path (zsched/store/direct.py) checks the same
ownership before each call. A write already in flight at the switch can still land on the
old master; `durable=True` closes that window too (docs/scaling.md). Dispatchers and workers
are not watched, on purpose: they run what landed on the old master meanwhile (measured in
docs/scaling.md).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import redis.exceptions as rex

log = logging.getLogger("zsched.sentinel")

CHANNEL = "+switch-master"


class MasterWatch:
    """One daemon thread that re-resolves `pool`'s master whenever Sentinel switches it."""

    def __init__(self, pool: Any, *, retry_s: float = 0.5, poll_s: float = 0.5) -> None:
        self._pool = weakref.ref(pool)
        self._service: str = pool.service_name
        self._retry_s, self._poll_s = retry_s, poll_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._resolving = threading.Lock()
        self._listening = 0
        #: Times the master was re-resolved after a switch message (tests read it).
        self.switches = 0
        #: Set while at least one Sentinel is listened to (tests wait for it).
        self.subscribed = threading.Event()
        # One thread per Sentinel: the failover's leader announces first, and the others as
        # they learn of it (hello messages, ~2 s); redis-py resolves the master through the
        # first Sentinel that answers, which may still name the old one, so each
        # announcement is one more chance to resolve once they agree.
        self._threads = [
            threading.Thread(target=self._run, args=(s,), daemon=True,
                             name=f"zsched-sentinel-watch-{self._service}-{i}")
            for i, s in enumerate(pool.sentinel_manager.sentinels)
        ]  # fmt: skip
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=self._poll_s + 2)

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def _count(self, delta: int) -> None:
        with self._lock:
            self._listening += delta
            if self._listening > 0:
                self.subscribed.set()
            else:
                self.subscribed.clear()

    def _run(self, sentinel: Any) -> None:
        while not self._stop.is_set() and self._pool() is not None:
            pubsub = sentinel.pubsub(ignore_subscribe_messages=True)
            listening = False
            try:
                pubsub.subscribe(CHANNEL)
                self._count(+1)
                listening = True
                self._listen(pubsub)
            except (rex.ConnectionError, rex.TimeoutError, OSError) as e:
                log.debug("sentinel watch of %s: %s; retrying", self._service, e)
                self._stop.wait(self._retry_s)
            finally:
                if listening:
                    self._count(-1)
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001 - closing a broken connection may raise
                    pass

    def _listen(self, pubsub: Any) -> None:
        while not self._stop.is_set():
            msg = pubsub.get_message(timeout=self._poll_s)
            if msg is None or msg.get("type") != "message":
                continue
            data = msg["data"].decode() if isinstance(msg["data"], bytes) else str(msg["data"])
            # "<master name> <old ip> <old port> <new ip> <new port>"
            if data.split(" ", 1)[0] == self._service:
                self._resolve(data)

    def _resolve(self, data: str) -> None:
        pool = self._pool()
        if pool is None:
            return
        with self._resolving:  # the Sentinels' threads may announce at once
            try:
                pool.get_master_address()
            except (rex.ConnectionError, rex.TimeoutError, OSError) as e:
                # Connections find the master themselves when they next connect; nothing is
                # lost by not doing it here.
                log.warning("sentinel watch of %s: master switched (%s) but not resolved: %s",
                            self._service, data, e)  # fmt: skip
                return
            self.switches += 1
        log.info("sentinel watch of %s: master switched (%s)", self._service, data)
