"""A Sentinel deployment on loopback: a master, its replicas and three Sentinels
(`redis-server sentinel.conf --sentinel`). `SentinelGroup` waits until every Sentinel knows the
replicas and the other Sentinels, so a failover can get its quorum; it can SIGKILL the master
and bring it back as a replica of the promoted one."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis
from cluster_harness import FAST, Node, _info, wait_until
from redis_server import free_port, redis_server_binary

SENTINEL_CONF = """\
port {port}
bind 127.0.0.1
dir {dir}
logfile {dir}/sentinel.log
sentinel monitor {service} 127.0.0.1 {master} {quorum}
sentinel down-after-milliseconds {service} {down_after_ms}
sentinel failover-timeout {service} {failover_timeout_ms}
sentinel parallel-syncs {service} 1
"""


@dataclass
class SentinelGroup:
    """A master, `replicas` replicas and `sentinels` Sentinels watching them."""

    service: str = "zs"
    replicas: int = 1
    sentinels: int = 3
    down_after_ms: int = 1000
    failover_timeout_ms: int = 10_000
    extra: tuple[str, ...] = ()
    master: Node | None = None
    replica_nodes: list[Node] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    root: str = ""

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def data_nodes(self) -> list[Node]:
        assert self.master is not None
        return [self.master, *self.replica_nodes]

    def start(self) -> SentinelGroup:
        self.root = tempfile.mkdtemp(prefix="zsched-sentinel-")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        def node(name: str, *args: str) -> Node:
            d = Path(self.root) / name
            d.mkdir()
            return Node(free_port(), str(d), (*FAST, *self.extra, *args))

        self.master = node("master")
        self.master.start()
        for i in range(self.replicas):
            r = node(f"replica{i}", "--replicaof", "127.0.0.1", str(self.master.port))
            r.start()
            self.replica_nodes.append(r)
        # Sentinels discover replicas from the master's INFO: start them once replicas linked.
        wait_until(self._replicas_linked, 30, "replicas linked to the master")
        for i in range(self.sentinels):
            port = free_port()
            d = Path(self.root) / f"sentinel{i}"
            d.mkdir()
            conf = d / "sentinel.conf"
            conf.write_text(SENTINEL_CONF.format(
                port=port, dir=d, service=self.service, master=self.master.port,
                quorum=self.sentinels // 2 + 1, down_after_ms=self.down_after_ms,
                failover_timeout_ms=self.failover_timeout_ms))  # fmt: skip
            cmd = [redis_server_binary(), str(conf), "--sentinel"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._procs.append(proc)
            self.sentinel_ports.append(port)
        wait_until(self._sentinels_ready, 30, "Sentinels that know each other and the replicas")

    def _replicas_linked(self) -> bool:
        return all(
            _info(r.port, "replication").get("master_link_status") == "up"
            for r in self.replica_nodes
        )

    def _sentinels_ready(self) -> bool:
        for port in self.sentinel_ports:
            c = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
            try:
                m = c.sentinel_master(self.service)
            finally:
                c.close()
            if int(m["num-other-sentinels"]) < self.sentinels - 1:
                return False
            if int(m["num-slaves"]) < self.replicas:
                return False
        return True

    def current_master_port(self) -> int:
        """The master's port as a majority of Sentinels report it."""
        seen: dict[int, int] = {}
        for port in self.sentinel_ports:
            c = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
            try:
                _host, mport = c.sentinel_get_master_addr_by_name(self.service)
                seen[int(mport)] = seen.get(int(mport), 0) + 1
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            finally:
                c.close()
        return max(seen, key=lambda p: seen[p])

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> Node:
        """Wait until the Sentinels promoted a replica and it accepts writes."""

        def promoted() -> int:
            port = self.current_master_port()
            if port == old_port:
                return 0
            return port if _info(port, "replication")["role"] == "master" else 0

        port = int(wait_until(promoted, timeout, "a Sentinel failover"))  # type: ignore[arg-type]
        return next(n for n in self.data_nodes if n.port == port)

    def kill_master(self) -> Node:
        """SIGKILL the current master; returns its node."""
        port = self.current_master_port()
        node = next(n for n in self.data_nodes if n.port == port)
        node.kill()
        return node

    def heal(self, old: Node, new: Node, timeout: float = 30.0) -> None:
        """Restart the killed `old` master as a replica of `new`, and wait until it is linked.

        (Restarted as it was, it would be an empty writable master for ~10 s, until Sentinel
        demotes it; clients asking the Sentinels never go there, but why risk it.)"""
        old.args = (*old.args, "--replicaof", "127.0.0.1", str(new.port))
        old.start()

        def linked() -> bool:
            return _info(old.port, "replication").get("master_link_status") == "up"

        wait_until(linked, timeout, "the old master to follow the new one")

    def stop(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for n in [self.master, *self.replica_nodes]:
            if n is not None:
                n.stop()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
