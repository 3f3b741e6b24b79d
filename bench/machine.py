"""What the figures were measured on: cores, CPU, memory, versions."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from typing import Any

from .common import ROOT


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


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
    }
