"""Chaos on Redis Cluster: the chaos workload on 3 masters + 3 replicas (tests/cluster_harness.py).

The same processes, workload, checks and accounting as the single-server run (chaos_harness),
against a `redis+cluster://` URL. The faulted deployment differs: the master that holds the
queue's slot is SIGKILLed mid-load (its replica is promoted; the old master comes back as the
new one's replica, after a full resync), together with SIGKILLs and SIGSTOPs of dispatchers
and workers, CLIENT KILLs and a SCRIPT FLUSH on the queue's master. Cluster nodes keep no AOF:
what a failover keeps is what the replica had.

python tests/chaos/chaos_cluster.py [--durable] [--seed N] [--runs N] [--seconds S] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from chaos_checks import judge  # noqa: E402
from chaos_faults import CTL, QUEUE, Procs, _client_kill, apply_fault, retrying  # noqa: E402
from chaos_harness import Observed, run  # noqa: E402
from chaos_plan import Config, Fault  # noqa: E402
from cluster_harness import Cluster  # noqa: E402

import zsched  # noqa: E402
from zsched.protocol.keys import QueueKeys  # noqa: E402

#: `make cluster-chaos`: a master kill and process kills over 40 s.
LONG = Config(
    runs=10_000, seconds=40.0, redis_kills=0, redis_stops=0, master_kills=1, script_flushes=1,
    client_kills=3, zombies=1, drain_timeout_s=90.0, snapshot_every_s=2.0,
)  # fmt: skip
#: The short version (a cluster_long test, and `--smoke`).
SMOKE = dataclasses.replace(LONG, runs=2_000, seconds=15.0, kill_every_s=2.0, client_kills=2)


class ClusterTarget:
    """A 3+3 Redis Cluster as the faulted deployment of a chaos run (see chaos_harness.run)."""

    def __init__(self) -> None:
        self.cluster = Cluster(masters=3, replicas=1).start()
        self.url = self.cluster.url
        self.key = QueueKeys(QUEUE).ready
        self._clients: dict[int, redis.Redis] = {}
        self.failovers: list[str] = []

    def ctl(self) -> redis.Redis:
        """A plain client on the master that holds the queue's slot now."""
        port = self.cluster.owner_of(self.key).port
        if port not in self._clients:
            self._clients[port] = redis.Redis(port=port, protocol=2, client_name=CTL,
                                              socket_timeout=10)  # fmt: skip
        return self._clients[port]

    def snapshot_client(self) -> redis.Redis:
        return self.ctl()

    def rules_app(self) -> Any:
        return zsched.App(self.url, queue=QUEUE)

    def apply(self, f: Fault, procs: Procs, rng: random.Random) -> str:
        if f.kind == "master_kill":
            return self._kill_master()
        if f.kind == "script_flush":
            for port in self.cluster.master_ports():
                retrying(lambda p=port: redis.Redis(port=p).script_flush())
            return "ok"
        if f.kind == "client_kill":
            n = retrying(lambda: _client_kill(self.ctl(), int(f.arg), rng))
            return f"killed {n}"
        return apply_fault(f, procs, None, None, rng)  # type: ignore[arg-type]

    def _kill_master(self) -> str:
        c = self.cluster
        victim = c.owner_of(self.key)
        c.kill(victim)
        new = c.wait_failover(victim)
        c.heal()  # the old master resyncs as the new one's replica: durable enqueues resume
        note = f"master {victim.port} killed, {new.port} promoted, {victim.port} back as replica"
        self.failovers.append(note)
        return note

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        for r in self._clients.values():
            r.close()
        self.cluster.stop()


def run_cluster(cfg: Config, out: Path, echo: Any = print) -> Observed:
    """One chaos run on a fresh cluster in `out`."""
    return run(cfg, out, echo, target=ClusterTarget())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--durable", action="store_true", help="enqueue with durable=True")
    p.add_argument("--smoke", action="store_true", help="the short version")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    cfg = SMOKE if a.smoke else LONG
    changes: dict[str, Any] = {"seed": a.seed if a.seed is not None else random.randrange(10**6),
                               "durable": a.durable}  # fmt: skip
    if a.runs is not None:
        changes["runs"] = a.runs
    if a.seconds is not None:
        changes["seconds"] = a.seconds
    cfg = dataclasses.replace(cfg, **changes)
    out = a.out or Path(tempfile.mkdtemp(prefix="zsched-cluster-chaos-"))
    obs = run_cluster(cfg, out)
    failures, table = judge(obs)
    print("\n".join(obs.fault_log))
    print(f"durable={cfg.durable}")
    print(table)
    print(f"logs in {out}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all properties held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
