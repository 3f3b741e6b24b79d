"""What the Python peers share: a hits file per consumer process, and readiness on stdout."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..common import ROOT, Proc


def consumer(argv: list[str], tag: str) -> Proc:
    """A consumer process whose handler reports through a fresh hits file."""
    fd, path = tempfile.mkstemp(prefix=f"zsched-bench-{tag}-", suffix=".hits")
    os.close(fd)
    return Proc(
        argv, env={"BENCH_HITS": path, "PYTHONUNBUFFERED": "1"}, cwd=str(ROOT), hits=Path(path)
    )


def cleanup(procs: list[Proc]) -> None:
    for p in procs:
        if p.hits is not None:
            p.hits.unlink(missing_ok=True)
