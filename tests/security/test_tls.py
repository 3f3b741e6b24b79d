"""`rediss://`: a dispatcher, a worker and the CLI over TLS only, with a private CA and a
client certificate (docs/security.md, "TLS")."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis_server import RedisServer, free_port
from sec_helpers import cli, env_for, spawn, stop, wait_for

import zsched


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


#: P-256 keys: as good for the test as RSA, and generated in milliseconds.
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_certs(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    openssl("req", "-x509", *NEW_KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=zsched test CA", cwd=d)  # fmt: skip
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", *NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "san.cnf",
                cwd=d)  # fmt: skip


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[RedisServer, int, Path]]:
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    port = free_port()
    # The plain port stays for the fixture's readiness check; the workload uses TLS only.
    with RedisServer("--tls-port", str(port), "--tls-cert-file", str(certs / "server.crt"),
                     "--tls-key-file", str(certs / "server.key"),
                     "--tls-ca-cert-file", str(certs / "ca.crt"),
                     "--tls-auth-clients", "yes") as srv:  # fmt: skip
        yield srv, port, certs


def tls_url(port: int, certs: Path, client_cert: bool = True) -> str:
    url = (f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certs / 'ca.crt'}"
           "&ssl_cert_reqs=required")  # fmt: skip
    if client_cert:
        url += f"&ssl_certfile={certs / 'client.crt'}&ssl_keyfile={certs / 'client.key'}"
    return url


def test_a_workload_runs_over_tls_only(tls, redis_server, tmp_path: Path, queue: str) -> None:
    _srv, port, certs = tls
    url = tls_url(port, certs)
    env = env_for(url, redis_server.url)
    sink = redis.Redis.from_url(redis_server.url)
    logs = [tmp_path / "dispatcher.log", tmp_path / "worker.log"]
    app_ref = "security.sec_app:app"
    procs = [spawn(logs[0], ["dispatcher", "--app", app_ref, "--queue", queue], env),
             spawn(logs[1], ["worker", app_ref, "--queue", queue], env)]  # fmt: skip
    try:
        for i in range(5):
            out = cli(["enqueue", "quick", "--id", f"tls-{i}", "--queue", queue], env)
            assert out.returncode == 0, out.stderr
        ran = lambda: {x.decode() for x in sink.lrange(f"sec:{queue}:executed", 0, -1)}  # noqa: E731
        wait_for(lambda: {f"tls-{i}" for i in range(5)} <= ran(), "five runs over TLS")
        status = cli(["status", "--json", "--queue", queue], env)
        assert status.returncode == 0 and '"dead": 0' in status.stdout
        # The in-process API over the same URL, sync and asyncio.
        app = zsched.App(url, queue=queue)
        assert app.get_run("tls-0").state == "done"
        # The direct path reads TLS replies with its own hiredis reader (zsched/store/direct.py).
        assert not app.enqueue("quick", run_id="tls-direct", delay=3600).duplicate
        (c,) = app.scripts._direct._idle  # type: ignore[union-attr]
        assert c.reader is not None
        assert app.cancel("tls-direct")
        app.close()
    finally:
        codes = stop(procs)
    assert codes == [0, 0], [p.read_text() for p in logs]


def test_the_tls_port_refuses_plain_text_and_clients_without_a_certificate(tls) -> None:
    _srv, port, certs = tls
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis(port=port, socket_timeout=0.5).ping()
    with pytest.raises(redis.exceptions.ConnectionError):
        zsched.App(tls_url(port, certs, client_cert=False), queue="q").redis.ping()
    # And a server certificate from another CA is not trusted.
    other = certs.parent / "other"
    other.mkdir()
    make_certs(other)
    wrong_ca = tls_url(port, certs).replace(str(certs / "ca.crt"), str(other / "ca.crt"))
    with pytest.raises(redis.exceptions.ConnectionError, match="certificate verify failed"):
        zsched.App(wrong_ca, queue="q").redis.ping()
    assert zsched.App(tls_url(port, certs), queue="q").redis.ping()
