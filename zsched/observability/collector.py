"""Queue gauges read from Redis at scrape time: a prometheus_client custom collector.

`QueueCollector` keeps no state between scrapes. Each scrape reads every queue it watches with
ONE non-transactional pipeline (one round trip per queue) and turns the replies into gauges
labelled `queue`:

=============================================== ==============================================
metric                                          read from
=============================================== ==============================================
zsched_delayed_runs                             lua/status.lua: runs in the delayed set
zsched_due_backlog_runs                         lua/status.lua: of them, due now (see below)
zsched_due_backlog_oldest_age_seconds           now - earliest due of delayed, if due, else 0
zsched_stream_length                            XLEN ready
zsched_consumer_group_lag                       XINFO GROUPS ready -> lag of GROUP (see below)
zsched_pending_runs                             XPENDING ready GROUP (summary count)
zsched_pending_oldest_idle_seconds              XPENDING ready GROUP - + 100 -> max idle
zsched_dead_letters                             XLEN dead
zsched_rule_next_fire_timestamp_seconds         ZRANGE rule_next 0 -1 WITHSCORES  (+ schedule)
zsched_rule_last_fire_timestamp_seconds         HGETALL rule_state -> last_fire_ms  (+ schedule)
zsched_queue_paused                             HMGET control paused_ms (pause_queue): 1 or 0
zsched_collector_up                             1 if the queue was read, 0 on a Redis error
zsched_queue_*_total (counters, + partition)    HGETALL stats (zsched/observability/queue_counters.py)
=============================================== ==============================================

Notes on the readings:

* **One clock.** "now" is the Redis server's TIME, read by a small read-only script in the same
  pipeline that also counts the delayed set, so `due backlog` and its age use the same instant
  as Redis itself (a pipeline cannot feed one reply into the next command). A `Clock` that
  returns a pinned instant (`FakeClock`) replaces TIME, for tests.
* **Due backlog** is counted leaf by leaf of the delayed set's B-tree, from whichever end is
  shorter: exact while either the due or the not-yet-due runs fill at most `STATUS_MAX_LEAVES`
  leaves (~32,000-64,000 runs), estimated beyond from the share of due leaves.
* **Lag.** `lag` of XINFO GROUPS (Redis >= 7) is the number of entries not yet delivered to the
  group. Redis reports it as nil when it cannot compute it (an entry was deleted from the part
  of the stream the group has not read yet). The collector then falls back to
  `XLEN - pending`: every acknowledged entry is deleted from the stream by the ack script, so
  what is on the stream and not pending is exactly what has not been delivered. Without the
  group (no worker ever joined) everything on the stream is undelivered: lag = XLEN.
* **Oldest pending idle.** XPENDING's extended form lists pending entries in id order; the
  collector reads the first `PENDING_SAMPLE` (100) and reports the largest idle time among them.
  The oldest entries are normally the longest idle, but a reclaimed entry restarts its idle
  clock, so with more than 100 pending entries the value is a lower bound of the true maximum.
* **Missing keys** read as zeros (and no rule series); a missing consumer group gives zero
  pending. A Redis error (connection refused, timeout, a key of the wrong type) drops every
  series of that queue for this scrape and sets `zsched_collector_up{queue}` to 0. A scrape
  never raises. After a connection error or time-out the remaining queues of that scrape are
  marked down without trying again. A scrape waits as long as the client lets it: give the
  client a short `socket_timeout`/`socket_connect_timeout` and few retries (redis-py retries a
  connection error 3 times with backoff by default) so that a Redis outage cannot outlast
  Prometheus's scrape timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import redis
import redis.cluster
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from zsched.clock import Clock, time_reply_us
from zsched.observability import queue_counters
from zsched.protocol.keys import QueueKeys
from zsched.store import counts as _counts
from zsched.store import scripts as S
from zsched.store.partitions import stored_count

logger = logging.getLogger(__name__)

#: Every metric name this collector exposes (the PromQL name test reads it).
COLLECTED_METRICS: tuple[str, ...] = (
    "zsched_delayed_runs",
    "zsched_due_backlog_runs",
    "zsched_due_backlog_oldest_age_seconds",
    "zsched_stream_length",
    "zsched_consumer_group_lag",
    "zsched_pending_runs",
    "zsched_pending_oldest_idle_seconds",
    "zsched_dead_letters",
    "zsched_rule_next_fire_timestamp_seconds",
    "zsched_rule_last_fire_timestamp_seconds",
    "zsched_queue_paused",
    "zsched_collector_up",
)
#: The counters read from the `stats` hashes (sample names, with _total).
COLLECTED_COUNTERS = queue_counters.COLLECTED_COUNTERS

#: How many pending entries are read to find the oldest idle one.
PENDING_SAMPLE = _counts.PENDING_SAMPLE

_HELP: dict[str, str] = {
    "zsched_delayed_runs": "Runs in the delayed set (due or not).",
    "zsched_due_backlog_runs": "Runs in the delayed set whose time has come but not dispatched.",
    "zsched_due_backlog_oldest_age_seconds": (
        "How long the oldest due run of the delayed set has been due (0 if none is due)."
    ),
    "zsched_stream_length": "Entries on the ready stream (waiting or pending).",
    "zsched_consumer_group_lag": "Entries of the ready stream not yet delivered to any worker.",
    "zsched_pending_runs": "Entries delivered to a worker and not yet acknowledged.",
    "zsched_pending_oldest_idle_seconds": (
        f"Largest idle time among the first {PENDING_SAMPLE} pending entries (0 if none)."
    ),
    "zsched_dead_letters": "Entries on the dead-letter stream.",
    "zsched_rule_next_fire_timestamp_seconds": "Unix time of a recurring rule's next fire.",
    "zsched_rule_last_fire_timestamp_seconds": "Unix time of a recurring rule's last fire.",
    "zsched_queue_paused": "1 while the queue is paused (pause_queue, zsched pause): nothing is dispatched.",
    "zsched_collector_up": "1 if the last scrape read the queue from Redis, 0 if it failed.",
}

#: Most leaves of the delayed set one scrape reads to count due runs: exact up to ~64,000 due
#: runs (or ~64,000 not due), estimated from the share of due leaves beyond (lua/status.lua).
STATUS_MAX_LEAVES = 500


def _oldest_age(lowest: Any, now: float) -> float:
    """Seconds the oldest due run has waited (0 when none is due)."""
    if lowest is None:
        return 0.0
    lowest_s = float(lowest) / 1000.0
    return now - lowest_s if lowest_s <= now else 0.0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class QueueSnapshot:
    """What one scrape read about one queue. Times are seconds."""

    queue: str
    now: float
    delayed: int
    due_backlog: int
    due_backlog_oldest_age: float
    stream_length: int
    group_lag: int
    pending: int
    pending_oldest_idle: float
    dead_letters: int
    rule_next_fire: dict[str, float] = field(default_factory=dict)
    rule_last_fire: dict[str, float] = field(default_factory=dict)
    #: The `stats` counts of each partition, by partition label ("" = not partitioned).
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    paused: bool = False


class QueueCollector(Collector):
    """Yields the queue gauges of `queues`, read from Redis at every scrape.

    `redis_client` is a synchronous redis-py client (RESP2, decode_responses=False). If a
    `registry` is given the collector registers itself on it; otherwise register it yourself.
    `clock` pins "now" for tests; by default (or when it returns None) the server's TIME is used.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        queues: Sequence[str],
        registry: CollectorRegistry | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._redis = redis_client
        self._keys = [QueueKeys(q) for q in queues]
        self._clock = clock
        if registry is not None:
            registry.register(self)

    @property
    def queues(self) -> list[str]:
        return [k.queue for k in self._keys]

    # -- reading ------------------------------------------------------------------------------

    def read(self, queue: str | QueueKeys) -> QueueSnapshot:
        """Read one queue (every partition of a partitioned one, summed). Raises
        `redis.RedisError` if Redis fails."""
        if isinstance(queue, QueueKeys):
            return self._read_keys(queue)
        n = stored_count(self._redis, queue)
        if n == 1:
            return self._read_keys(QueueKeys(queue))
        return _merge(queue, [self._read_keys(QueueKeys(queue, i)) for i in range(n)])

    def _read_keys(self, keys: QueueKeys) -> QueueSnapshot:
        """One queue partition in one pipeline (on a cluster: the script, then a pipeline)."""
        replies = self._fetch(keys)
        c = _counts.decode(replies[0], replies[1 : 1 + _counts.REPLIES])
        next_r, state_r = replies[1 + _counts.REPLIES :]
        now = time_reply_us(c.time) / 1_000_000
        return QueueSnapshot(
            queue=keys.queue,
            now=now,
            delayed=c.delayed,
            due_backlog=c.due,
            due_backlog_oldest_age=_oldest_age(c.head_ms, now),
            stream_length=c.stream_length,
            group_lag=c.group_lag,
            pending=c.pending,
            pending_oldest_idle=c.oldest_pending_idle_ms / 1000.0,
            dead_letters=c.dead,
            rule_next_fire={_text(m): float(s) / 1000.0 for m, s in next_r},
            rule_last_fire=dict(_last_fires(keys.queue, state_r)),
            counters={
                _partition(keys): queue_counters.decode(
                    c.stats, rules={_text(m) for m, _ in next_r} | {_text(k) for k in state_r}
                )
            },
            paused=c.paused_ms is not None,
        )

    def _fetch(self, keys: QueueKeys) -> list[Any]:
        """status.lua's reply, the shared counts' replies (zsched/store/counts.py, the reader
        App.status() uses) and the rules' reads, in `_read_keys`'s order. Errors are left in
        the list for `_counts.decode`; the rules' reads raise."""
        pinned = self._clock.now_ms() if self._clock is not None else None
        call = S.status(keys, now_ms=pinned, max_leaves=STATUS_MAX_LEAVES)
        # EVALSHA: the source (kilobytes) goes only when the server's script cache lacks it.
        delayed_args = (len(call.keys), *call.keys, *call.args)
        pipe = self._redis.pipeline(transaction=False)
        cluster = isinstance(self._redis, redis.cluster.RedisCluster)
        if cluster:  # cluster pipelines refuse scripts
            delayed_first = self._status(call.name, delayed_args)
        else:
            pipe.evalsha(S.sha(call.name), *delayed_args)
        _counts.queue(pipe, keys)
        pipe.zrange(keys.rule_next, 0, -1, withscores=True)
        pipe.hgetall(keys.rule_state)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        if cluster:
            replies = [delayed_first, *replies]
        elif isinstance(replies[0], redis.exceptions.NoScriptError):  # a fresh or flushed cache
            replies[0] = self._status(call.name, delayed_args)
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception) and not 0 < i <= _counts.REPLIES:
                raise reply
        return replies

    def _status(self, name: str, args: tuple[Any, ...]) -> Any:
        """status.lua by EVALSHA, loaded by EVAL when the cache lacks it; an error is returned
        as the pipeline's would be."""
        try:
            try:
                return self._redis.evalsha(S.sha(name), *args)
            except redis.exceptions.NoScriptError:
                return self._redis.eval(S.source(name), *args)
        except redis.exceptions.ResponseError as exc:
            return exc

    # -- prometheus_client interface ----------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """Names only, so registering does not read Redis."""
        return [*self._families().values(), *queue_counters.families().values()]

    def collect(self) -> Iterable[Metric]:
        fams = self._families()
        counters = queue_counters.families()
        unreachable = False
        for keys in self._keys:
            q = keys.queue
            if unreachable:  # one client, one server: do not wait for it once per queue
                fams["zsched_collector_up"].add_metric([q], 0.0)
                continue
            try:
                snap = self.read(q)
            except (redis.RedisError, OSError, ValueError, TypeError, KeyError) as exc:
                logger.warning("collector could not read queue %s: %r", q, exc, extra={"queue": q})
                fams["zsched_collector_up"].add_metric([q], 0.0)
                unreachable = isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError)
                continue
            fams["zsched_collector_up"].add_metric([q], 1.0)
            fams["zsched_delayed_runs"].add_metric([q], snap.delayed)
            fams["zsched_due_backlog_runs"].add_metric([q], snap.due_backlog)
            fams["zsched_due_backlog_oldest_age_seconds"].add_metric(
                [q], snap.due_backlog_oldest_age
            )
            fams["zsched_stream_length"].add_metric([q], snap.stream_length)
            fams["zsched_consumer_group_lag"].add_metric([q], snap.group_lag)
            fams["zsched_pending_runs"].add_metric([q], snap.pending)
            fams["zsched_pending_oldest_idle_seconds"].add_metric([q], snap.pending_oldest_idle)
            fams["zsched_dead_letters"].add_metric([q], snap.dead_letters)
            fams["zsched_queue_paused"].add_metric([q], 1.0 if snap.paused else 0.0)
            for schedule, ts in sorted(snap.rule_next_fire.items()):
                fams["zsched_rule_next_fire_timestamp_seconds"].add_metric([q, schedule], ts)
            for schedule, ts in sorted(snap.rule_last_fire.items()):
                fams["zsched_rule_last_fire_timestamp_seconds"].add_metric([q, schedule], ts)
            for part, stats in sorted(snap.counters.items()):
                queue_counters.add(counters, q, part, stats)
        return [*fams.values(), *counters.values()]

    @staticmethod
    def _families() -> dict[str, GaugeMetricFamily]:
        fams: dict[str, GaugeMetricFamily] = {}
        for name in COLLECTED_METRICS:
            labels = ["queue", "schedule"] if name.startswith("zsched_rule_") else ["queue"]
            fams[name] = GaugeMetricFamily(name, _HELP[name], labels=labels)
        return fams


def _merge(queue: str, parts: Sequence[QueueSnapshot]) -> QueueSnapshot:
    """One snapshot for a partitioned queue: counts add up, ages are the worst partition's."""
    return QueueSnapshot(
        queue=queue,
        now=max(p.now for p in parts),
        delayed=sum(p.delayed for p in parts),
        due_backlog=sum(p.due_backlog for p in parts),
        due_backlog_oldest_age=max(p.due_backlog_oldest_age for p in parts),
        stream_length=sum(p.stream_length for p in parts),
        group_lag=sum(p.group_lag for p in parts),
        pending=sum(p.pending for p in parts),
        pending_oldest_idle=max(p.pending_oldest_idle for p in parts),
        dead_letters=sum(p.dead_letters for p in parts),
        rule_next_fire={k: v for p in parts for k, v in p.rule_next_fire.items()},
        rule_last_fire={k: v for p in parts for k, v in p.rule_last_fire.items()},
        counters={k: v for p in parts for k, v in p.counters.items()},
        paused=any(p.paused for p in parts),
    )


def _partition(keys: QueueKeys) -> str:
    return "" if keys.partition is None else str(keys.partition)


def _last_fires(queue: str, state: Mapping[bytes, bytes]) -> Iterator[tuple[str, float]]:
    """(schedule, last fire in seconds) for every rule state that has a last fire."""
    for raw_id, blob in state.items():
        schedule = _text(raw_id)
        try:
            decoded = msgpack.unpackb(blob, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            logger.debug(
                "rule state of %s is not msgpack: %r", schedule, exc, extra={"queue": queue}
            )
            continue
        if not isinstance(decoded, dict):
            continue
        last = decoded.get("last_fire_ms")
        if isinstance(last, int | float) and not isinstance(last, bool):
            yield schedule, float(last) / 1000.0
