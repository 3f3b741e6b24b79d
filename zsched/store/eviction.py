"""Refusing a Redis that may evict zsched's keys (`maxmemory-policy`).

With `maxmemory` set and a policy other than `noeviction`, Redis deletes keys when memory is
full, and nothing tells the application: delayed runs, rules and streams vanish without a
trace. Managed Redis often defaults to such a policy. Which zsched keys are at risk:

- `allkeys-lru`, `allkeys-lfu`, `allkeys-random`: any key, so any run, rule or stream;
- `volatile-lru`, `volatile-lfu`, `volatile-random`, `volatile-ttl`: keys with a TTL. zsched
  gives one to the completion and cancel records (`done`, `cancelled`: the dedupe window; an
  evicted record lets a run id enqueued again run twice), to kept outcomes (a result is lost),
  to cancel requests (a running run does not hear its cancel) and to the per-task limits'
  counters (a limit is exceeded). Rules' overlap leases have no TTL (a lease ends with its
  run: done, dead, cancel, unlease, or a fire that finds it stale), so only `allkeys-*` can
  evict one.

So every policy but `noeviction` is a risk (with `maxmemory 0` Redis never evicts). The policy
is read from `INFO memory`, which needs no CONFIG permission. A dispatcher or worker refuses to
start (EvictionPolicyError) unless `allow_eviction` is given; it checks again every
`EVERY_S` and serves `zsched_redis_eviction_risk` (1 while the risk lasts), which the alert
ZschedRedisMayEvict watches.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from zsched.errors import EvictionPolicyError
from zsched.store.connection import ensure_ready, is_cluster

log = logging.getLogger(__name__)
#: Seconds between two readings of the policy while a process runs. 60, not 30: with a
#: dispatcher and a worker it was 0.07 of the ~1 command a second an idle queue may cost.
EVERY_S = 60.0
SAFE_POLICY = "noeviction"


@dataclass(frozen=True)
class Verdict:
    """What one `INFO memory` says: the policy, maxmemory, and the risk in words (or None)."""

    policy: str
    maxmemory: int
    risk: str | None


def assess(info: dict[str, Any]) -> Verdict:
    """The verdict of one server's `INFO memory` reply."""
    policy = str(info.get("maxmemory_policy", SAFE_POLICY))
    maxmemory = int(info.get("maxmemory", 0) or 0)
    if policy == SAFE_POLICY or maxmemory == 0:
        return Verdict(policy, maxmemory, None)
    if policy.startswith("volatile-"):
        what = ("evicts keys that have a TTL when memory is full; zsched's completion and "
                "cancel records (the dedupe window), kept outcomes, cancel requests and "
                "per-task limit counters have one, so a run id enqueued again could run "
                "twice, a kept result or a cancel be lost and a task's limit be exceeded")  # fmt: skip
    else:
        what = ("may evict any key when memory is full: delayed runs, rules and streams "
                "would vanish without a trace")  # fmt: skip
    return Verdict(policy, maxmemory, f"maxmemory-policy {policy} (maxmemory {maxmemory}) {what}")


def refusal(verdict: Verdict, queue: str, role: str) -> str:
    """The message of a process that refuses to start, saying what to set."""
    return (
        f"{role} of queue {queue!r} refuses to start: Redis {verdict.risk}. Set "
        f"maxmemory-policy noeviction (`CONFIG SET maxmemory-policy noeviction`, redis.conf, "
        f"or your provider's parameter group) and size maxmemory for the queue, or start with "
        f"--allow-eviction (allow_eviction=True) to run anyway, with the metric "
        f"zsched_redis_eviction_risk at 1 and the alert ZschedRedisMayEvict firing"
    )


async def read_verdict(client: Any, key: str) -> Verdict | None:
    """The verdict of the server holding `key` (on a cluster, the slot's master); None when
    INFO is not available (fakeredis, a proxy or an ACL that hides it)."""
    try:
        if is_cluster(client):
            await ensure_ready(client)
            node = client.get_node_from_key(key)
            info = await client.info("memory", target_nodes=node)
        else:
            info = await client.info("memory")
    except (redis.exceptions.ResponseError, NotImplementedError, AttributeError, TypeError):
        return None
    if not isinstance(info, dict) or "maxmemory_policy" not in info:
        return None
    return assess(info)


class EvictionWatch:
    """Reads the policy at start and every `every_s`; the first reading that finds a risk
    raises EvictionPolicyError unless `allow`; later changes are logged once each."""

    def __init__(self, client: Any, key: str, queue: str, role: str, metrics: Any,
                 allow: bool, every_s: float = EVERY_S) -> None:  # fmt: skip
        self.client, self.key, self.queue, self.role = client, key, queue, role
        self.allow, self.every_s = allow, every_s
        self.metrics = metrics
        self.checked = False
        self.risk: str | None = None
        self._next = 0.0

    async def check(self, force: bool = False) -> Verdict | None:
        """Read the policy if due (or `force`); raise EvictionPolicyError on a refused risk."""
        now = time.monotonic()
        if not force and now < self._next:
            return None
        self._next = now + self.every_s
        verdict = await read_verdict(self.client, self.key)
        if verdict is None:
            return None
        # The series appears with the first reading (a labelled child starts at 0).
        self.metrics.eviction_risk.labels(self.queue, self.role).set(1 if verdict.risk else 0)
        first, changed = not self.checked, verdict.risk != self.risk
        self.checked, self.risk = True, verdict.risk
        if verdict.risk and first and not self.allow:
            raise EvictionPolicyError(refusal(verdict, self.queue, self.role))
        if changed:
            self._log(verdict)
        return verdict

    def _log(self, verdict: Verdict) -> None:
        extra = {"queue": self.queue}
        if verdict.risk is None:
            log.info("%s: Redis maxmemory-policy is now %s; zsched's keys are safe from "
                     "eviction", self.role, verdict.policy, extra=extra)  # fmt: skip
        elif self.allow:
            log.warning("%s runs with --allow-eviction: Redis %s", self.role, verdict.risk,
                        extra=extra)  # fmt: skip
        else:
            log.error("%s: Redis %s. Set maxmemory-policy noeviction", self.role,
                      verdict.risk, extra=extra)  # fmt: skip
