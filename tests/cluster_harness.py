"""Real Redis Cluster and Sentinel deployments on loopback, for tests and benchmarks.

`Cluster` starts `masters` redis-server processes with `cluster-enabled yes` (plus `replicas`
per master), joins them with `redis-cli --cluster create`, and waits until every node says
`cluster_state:ok` and every replica's link to its master is up. It can SIGKILL a node and bring
it back (as a replica of whoever took over). Sentinel: tests/cluster/sentinel_harness.py.

Timings on this machine (REDIS-NOTES): 3+3 nodes start in ~3 s; with a node timeout of
2000 ms, writes resume ~3.5 s after a master is killed; Sentinel with
down-after-milliseconds 1000 fails over in ~2.3 s.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis_server import RedisServer, free_port, redis_server_binary

#: Extra arguments that make replication and cluster bookkeeping fast on loopback.
FAST = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


def redis_cli_binary() -> str:
    exe = shutil.which("redis-cli") or str(Path(redis_server_binary()).with_name("redis-cli"))
    if not Path(exe).exists():
        raise RuntimeError("redis-cli not found: it ships with redis-server (redis-tools)")
    return exe


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> object:
    """Poll `cond` until truthy; a safety net against hangs, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = cond()
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _info(port: int, section: str) -> dict[str, str]:
    c = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True)
    try:
        raw = c.execute_command("INFO", section) if section != "cluster" else None
        if raw is None:
            text = c.execute_command("CLUSTER", "INFO")
            return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {k: str(v) for k, v in raw.items()}
    finally:
        c.close()


@dataclass(eq=False)  # identity: a node is the same node across restarts
class Node:
    """One redis-server of a deployment; `server` is None while it is killed."""

    port: int
    dir: str
    args: tuple[str, ...]
    server: RedisServer | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = RedisServer(*self.args, port=self.port, dir=self.dir).start()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last writes, like a crashed host."""
        if self.server is not None and self.server.proc is not None:
            self.server.proc.send_signal(signal.SIGKILL)
            self.server.proc.wait()
        self.server = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server = None

    @property
    def alive(self) -> bool:
        return self.server is not None

    def client(self, **kw: object) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=1, **kw)


@dataclass
class Cluster:
    """A Redis Cluster on loopback: `masters` masters with `replicas` replicas each."""

    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 2000
    extra: tuple[str, ...] = ()
    nodes: list[Node] = field(default_factory=list)
    root: str = ""
    _watched: dict[int, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(n.addr for n in self.nodes)

    def start(self) -> Cluster:
        self.root = tempfile.mkdtemp(prefix="zsched-cluster-")
        for i in range(self.masters * (1 + self.replicas)):
            port, bus = free_port(), free_port()
            d = str(Path(self.root) / f"n{i}")
            Path(d).mkdir()
            args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-port", str(bus), *FAST, *self.extra)  # fmt: skip
            self.nodes.append(Node(port, d, args))
        try:
            for n in self.nodes:
                n.start()
            if self.masters >= 3:
                cmd = [redis_cli_binary(), "--cluster", "create", *(n.addr for n in self.nodes),
                       "--cluster-replicas", str(self.replicas), "--cluster-yes"]  # fmt: skip
                subprocess.run(cmd, check=True, capture_output=True, timeout=60)
            else:
                self._create_small()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_small(self) -> None:
        """redis-cli refuses clusters of fewer than 3 masters: split the slots by hand."""
        if self.replicas:
            raise ValueError("replicas need at least 3 masters here")
        per = 16384 // self.masters
        for i, n in enumerate(self.nodes):
            c = n.client()
            try:
                last = 16383 if i == self.masters - 1 else (i + 1) * per - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
                if i:
                    first = self.nodes[0]
                    bus = first.args[first.args.index("--cluster-port") + 1]
                    c.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port, bus)
            finally:
                c.close()

    def roles(self) -> dict[int, str]:
        """port -> 'master' or 'slave', as the live nodes see themselves."""
        return {n.port: _info(n.port, "replication")["role"] for n in self.nodes if n.alive}

    def master_ports(self) -> list[int]:
        return sorted(p for p, r in self.roles().items() if r == "master")

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Every live node: cluster_state ok, all slots covered; every replica linked."""

        def healthy() -> bool:
            for n in self.nodes:
                if not n.alive:
                    continue
                info = _info(n.port, "cluster")
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
                rep = _info(n.port, "replication")
                if rep["role"] == "slave" and rep.get("master_link_status") != "up":
                    return False
            return len(self.master_ports()) >= self.masters

        wait_until(healthy, timeout, "a healthy cluster")

    def _slot_owners(self) -> list[tuple[int, int, int]]:
        """(first slot, last slot, master port) as a live node sees the cluster."""
        live = next(n for n in self.nodes if n.alive)
        c = live.client()
        try:
            return [
                (int(s), int(e), int(m[1])) for s, e, m, *_ in c.execute_command("CLUSTER SLOTS")
            ]
        finally:
            c.close()

    def owner_of(self, key: str) -> Node:
        """The node currently serving `key`'s slot."""
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        port = next(p for s, e, p in self._slot_owners() if s <= slot <= e)
        return next(n for n in self.nodes if n.port == port)

    def replicas_of(self, master: Node) -> list[Node]:
        out = []
        for n in self.nodes:
            if n.alive and n is not master:
                rep = _info(n.port, "replication")
                if rep["role"] == "slave" and rep.get("master_port") == str(master.port):
                    out.append(n)
        return out

    def kill(self, node: Node) -> None:
        """SIGKILL `node`, remembering one of its slots to watch the failover."""
        mine = [s for s, _e, p in self._slot_owners() if p == node.port]
        self._watched[node.port] = mine[0] if mine else -1
        node.kill()

    def wait_failover(self, dead: Node, timeout: float = 30.0) -> Node:
        """Wait until another live node serves the killed master's slots; returns that node."""
        slot = self._watched.get(dead.port, -1)
        alive = {n.port for n in self.nodes if n.alive}

        def new_owner() -> int:
            # Survivors keep naming `dead` as the owner until the replicas vote a successor.
            port = next(p for s, e, p in self._slot_owners() if s <= slot <= e)
            return port if port != dead.port and port in alive else 0

        port = int(wait_until(new_owner, timeout, f"failover of {dead.addr}"))  # type: ignore[arg-type]
        self.wait_slots_ok(timeout)
        return next(n for n in self.nodes if n.port == port)

    def wait_slots_ok(self, timeout: float = 30.0) -> None:
        def ok() -> bool:
            return all(
                _info(n.port, "cluster").get("cluster_state") == "ok" for n in self.nodes if n.alive
            )

        wait_until(ok, timeout, "cluster_state:ok on every live node")

    def heal(self, timeout: float = 30.0) -> None:
        """Restart every killed node (it rejoins as a replica) and wait for a healthy cluster."""
        restarted = [n for n in self.nodes if not n.alive]
        for n in restarted:
            n.start()

        def rejoined() -> bool:
            # A restarted master first believes it still owns its slots; wait until it learnt
            # that it was replaced and follows its successor.
            for n in restarted:
                rep = _info(n.port, "replication")
                if rep["role"] != "slave" or rep.get("master_link_status") != "up":
                    return False
            return True

        wait_until(rejoined, timeout, "restarted nodes to rejoin as replicas")
        self.wait_healthy(timeout)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
