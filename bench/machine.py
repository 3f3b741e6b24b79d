"""What the figures were measured on: cores, CPU, memory, versions."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import time
from importlib import metadata
from typing import Any

from .common import ROOT


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def calibrate() -> dict[str, float]:
    """How fast this machine is right now, to compare figures across sessions: the same kind of
    VM has measured 2-3x apart on different days. A pure-Python loop, and the round trip of a
    PING on a raw socket and through redis-py to a private redis-server (medians of 5)."""
    from .common import client, server

    def loop() -> float:
        t = time.perf_counter()
        s = 0
        for i in range(2_000_000):
            s += i
        return (time.perf_counter() - t) * 1e9 / 2_000_000

    out: dict[str, float] = {"python_loop_ns_per_iter": statistics.median(loop() for _ in range(5))}
    with server() as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r = client(srv.url)
        raw, lib = [], []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(2000):
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                sock.recv(64)
            raw.append((time.perf_counter() - t) / 2000 * 1e6)
            t = time.perf_counter()
            for _ in range(2000):
                r.ping()
            lib.append((time.perf_counter() - t) / 2000 * 1e6)
        sock.close()
        r.close()
    out["raw_ping_us"] = statistics.median(raw)
    out["redis_py_ping_us"] = statistics.median(lib)
    return {k: round(v, 1) for k, v in out.items()}


def describe() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            mem_kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal"))
    except (OSError, StopIteration):
        mem_kb = 0
    try:
        redis_v = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=5
        ).stdout.split()[2]
    except (OSError, IndexError, subprocess.SubprocessError):
        redis_v = "?"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": redis_v,
        "redis_py": _version("redis"),
        "hiredis": _version("hiredis"),
        "msgpack": _version("msgpack"),
        "commit": commit,
        "calibration": calibrate(),
    }
