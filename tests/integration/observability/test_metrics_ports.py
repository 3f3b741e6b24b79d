"""Several worker processes on one host given the same --metrics-port do not collide."""

from __future__ import annotations

import http.client
import re
import signal
import urllib.request

from procs import stop, wait_for, zsched_proc
from redis_server import free_port


def test_two_workers_with_one_metrics_port_both_serve(redis_url, queue) -> None:
    port = free_port()
    args = (
        "worker",
        "integration.apps.crashapp:app",
        "--queue",
        queue,
        "--metrics-port",
        str(port),
    )
    a = zsched_proc(*args, url=redis_url)
    try:
        wait_for(lambda: _serves(port), 30, "the first worker's /metrics")
        b = zsched_proc(*args, url=redis_url)
        try:
            # The next free port: port + 1 unless something else on the host holds it.
            second = wait_for(lambda: next((p for p in range(port + 1, port + 16) if _serves(p)),
                                           None), 30, "the second worker's /metrics")  # fmt: skip
            wait_for(lambda: "zsched_process_heartbeat_timestamp_seconds" in _get(second), 30,
                     "the second worker's heartbeat")  # fmt: skip
        finally:
            out_b = stop(b, signal.SIGTERM)
    finally:
        out_a = stop(a, signal.SIGTERM)
    assert re.search(rf"serving /metrics on port {port}\b", out_a)
    assert re.search(rf"serving /metrics on port {second}\b", out_b)


def _get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return str(r.read().decode())


def _serves(port: int) -> bool:
    try:
        return "zsched_" in _get(port)
    # HTTPException: probing a port nobody listens on in the ephemeral range can connect the
    # socket to itself (TCP simultaneous open), and the request comes back as the "response".
    except (OSError, http.client.HTTPException):
        return False
