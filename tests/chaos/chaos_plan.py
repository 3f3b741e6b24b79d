"""The seeded fault plan of a chaos run: which fault, when, on what. Pure; printed by the run."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Config:
    """One chaos run. The defaults are `make chaos`; the smoke test shrinks them."""

    seed: int = 1
    runs: int = 20_000
    seconds: float = 60.0
    dispatchers: int = 3
    workers: int = 3
    concurrency: int = 16
    visibility_ms: int = 2_000
    #: Mean gap between SIGKILLs of a random dispatcher or worker.
    kill_every_s: float = 2.0
    #: Workers SIGSTOPped past the visibility timeout, then SIGCONTed.
    zombies: int = 2
    redis_kills: int = 2
    #: redis-server SIGSTOPped (hung, not dead: connections stay open, nothing answers) for
    #: `redis_stop_s`, then SIGCONTed.
    redis_stops: int = 1
    redis_stop_s: float = 10.0
    #: Redis Cluster runs (chaos_cluster.py): SIGKILLs of the master holding the queue (its
    #: replica takes over; the old master comes back as a replica), and durable enqueues.
    master_kills: int = 0
    durable: bool = False
    script_flushes: int = 2
    client_kills: int = 6
    #: Give up waiting for the drain after this long (a safety net, reported as lost runs).
    drain_timeout_s: float = 90.0
    #: Recurring rules (one per misfire and overlap policy) when `App.schedule` exists.
    rules: bool = True
    #: Seconds between two snapshots of every place a run can be (the one-place check).
    snapshot_every_s: float = 5.0
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    at_s: float
    #: kill | stop | cont | redis_kill | redis_stop | master_kill | script_flush | client_kill
    kind: str
    #: "dispatcher-N" / "worker-N" for kill, stop, cont; "" otherwise.
    target: str = ""
    #: stop, redis_stop: seconds stopped; redis_kill: seconds down; client_kill: connections.
    arg: float = 0.0

    def describe(self) -> str:
        what = {
            "kill": f"SIGKILL {self.target} (restarted)",
            "stop": f"SIGSTOP {self.target} for {self.arg:.1f}s (zombie)",
            "cont": f"SIGCONT {self.target}",
            "redis_kill": f"SIGKILL redis-server, restart from AOF after {self.arg:.2f}s",
            "redis_stop": f"SIGSTOP redis-server for {self.arg:.1f}s (hung), then SIGCONT",
            "master_kill": "SIGKILL the cluster master holding the queue (replica promoted, "
            "old master back as a replica)",
            "script_flush": "SCRIPT FLUSH",
            "client_kill": f"CLIENT KILL {int(self.arg)} random connection(s)",
        }[self.kind]
        return f"t+{self.at_s:6.2f}s  {what}"


def make_plan(cfg: Config) -> list[Fault]:
    """Faults spread over the workload's seconds, from `cfg.seed` alone."""
    rng = random.Random(cfg.seed)
    t_end = cfg.seconds
    faults: list[Fault] = []
    # Zombies first, so kills can avoid a stopped worker (one zombie at a time).
    stopped: list[tuple[float, float, str]] = []
    for i in range(cfg.zombies):
        slot = t_end / max(cfg.zombies, 1)
        at = slot * i + rng.uniform(0.15, 0.55) * slot
        dur = cfg.visibility_ms / 1000 + rng.uniform(1.0, 2.0)
        target = f"worker-{rng.randrange(cfg.workers)}"
        stopped.append((at, at + dur, target))
        faults += [Fault(at, "stop", target, dur), Fault(at + dur, "cont", target)]
    t = rng.uniform(0.5, 1.5) * cfg.kill_every_s
    while t < t_end:
        role = rng.choice(["dispatcher"] * cfg.dispatchers + ["worker"] * cfg.workers)
        n = cfg.dispatchers if role == "dispatcher" else cfg.workers
        target = f"{role}-{rng.randrange(n)}"
        if not any(a - 0.5 <= t <= b + 0.5 and target == w for a, b, w in stopped):
            faults.append(Fault(t, "kill", target))
        t += rng.uniform(0.5, 1.5) * cfg.kill_every_s
    for i in range(cfg.redis_kills):
        slot = t_end / (cfg.redis_kills + 1)
        faults.append(
            Fault(
                slot * (i + 1) + rng.uniform(-0.2, 0.2) * slot,
                "redis_kill",
                "",
                rng.uniform(1.0, 2.0),
            )
        )
    for _ in range(cfg.script_flushes):
        faults.append(Fault(rng.uniform(0.1, 0.9) * t_end, "script_flush"))
    for _ in range(cfg.client_kills):
        faults.append(Fault(rng.uniform(0.05, 0.95) * t_end, "client_kill", "", rng.randint(1, 3)))
    # Drawn last, so the faults above stay where a seed put them before this kind existed.
    for i in range(cfg.redis_stops):
        slot = t_end / cfg.redis_stops
        faults.append(Fault(slot * i + rng.uniform(0.2, 0.6) * slot, "redis_stop", "",
                            cfg.redis_stop_s))  # fmt: skip
    for i in range(cfg.master_kills):
        slot = t_end / cfg.master_kills
        faults.append(Fault(slot * i + rng.uniform(0.3, 0.6) * slot, "master_kill"))
    return sorted(faults, key=lambda f: f.at_s)


def format_plan(cfg: Config, plan: list[Fault]) -> str:
    head = (
        f"chaos plan: seed={cfg.seed} runs={cfg.runs} over {cfg.seconds:g}s, "
        f"{cfg.dispatchers} dispatchers, {cfg.workers} workers, "
        f"visibility timeout {cfg.visibility_ms} ms, {len(plan)} fault events"
    )
    return "\n".join([head, *("  " + f.describe() for f in plan)])
