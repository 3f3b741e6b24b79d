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


def _calls(r: redis.Redis) -> int:
    stats: dict[str, Any] = r.info("commandstats")  # type: ignore[assignment]
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@dataclass
class Cost:
    cpu_s: float
    commands: int

    def per_run(self, n: int, prefix: str) -> dict[str, float]:
        """{prefix_redis_us_per_run, prefix_commands_per_run}."""
        n = max(n, 1)
        return {
            f"{prefix}_redis_us_per_run": 1e6 * self.cpu_s / n,
            f"{prefix}_commands_per_run": self.commands / n,
        }

    def __sub__(self, other: Cost) -> Cost:
        return Cost(self.cpu_s - other.cpu_s, self.commands - other.commands)


class Meter:
    """Reads redis-server's CPU time and command count; `start()` then `stop()` -> Cost."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._t0 = Cost(0.0, 0)

    def read(self) -> Cost:
        info: dict[str, Any] = self.r.info("cpu")  # type: ignore[assignment]
        cpu = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        return Cost(cpu, _calls(self.r))

    def start(self) -> None:
        self._t0 = self.read()

    def stop(self) -> Cost:
        return self.read() - self._t0


def meter_for(srv: Any) -> Meter:
    """A Meter on a bench server (tests/redis_server.RedisServer)."""
    return Meter(redis.Redis.from_url(srv.url, protocol=2))
