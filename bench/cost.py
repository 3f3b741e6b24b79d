"""What Redis itself pays for a piece of work: server CPU time and commands run.

CPU is redis-server's user + system time (INFO cpu, getrusage: microseconds, where /proc's
ticks are 10 ms); commands are
the INFO commandstats calls, those run inside scripts included (an EVALSHA counts once, plus
each redis.call it makes), less our own INFO calls. Divided by the runs, they are the cost per
run that caps one shard's throughput when clients scale out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

#: Calls counted apart: every script call and every read is a round trip a client paid, so
#: their count per run shows how full the batches were (not moved by the host's load).
APART = ("evalsha", "xreadgroup")


def _stats(r: redis.Redis) -> dict[str, Any]:
    return r.info("commandstats")  # type: ignore[return-value]


def _calls(r: redis.Redis) -> int:
    return _total(_stats(r))


def _total(stats: dict[str, Any]) -> int:
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def _apart(stats: dict[str, Any]) -> dict[str, int]:
    return {c: int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in APART}


@dataclass
class Cost:
    cpu_s: float
    commands: int
    apart: dict[str, int] | None = None

    def per_run(self, n: int, prefix: str) -> dict[str, float]:
        """{prefix_redis_us_per_run, prefix_commands_per_run, prefix_<command>_per_run}."""
        n = max(n, 1)
        out = {
            f"{prefix}_redis_us_per_run": 1e6 * self.cpu_s / n,
            f"{prefix}_commands_per_run": self.commands / n,
        }
        out.update((f"{prefix}_{c}_per_run", v / n) for c, v in (self.apart or {}).items())
        return out

    def __sub__(self, other: Cost) -> Cost:
        a, b = self.apart or {}, other.apart or {}
        apart = {c: a.get(c, 0) - b.get(c, 0) for c in a}
        return Cost(self.cpu_s - other.cpu_s, self.commands - other.commands, apart)


class Meter:
    """Reads redis-server's CPU time and command count; `start()` then `stop()` -> Cost."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._t0 = Cost(0.0, 0, {})

    def read(self) -> Cost:
        info: dict[str, Any] = self.r.info("cpu")  # type: ignore[assignment]
        cpu = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        stats = _stats(self.r)
        return Cost(cpu, _total(stats), _apart(stats))

    def start(self) -> None:
        self._t0 = self.read()

    def stop(self) -> Cost:
        return self.read() - self._t0


def meter_for(srv: Any) -> Meter:
    """A Meter on a bench server (tests/redis_server.RedisServer)."""
    return Meter(redis.Redis.from_url(srv.url, protocol=2))
