"""What the Python peers share: a hits file per consumer process, and readiness on stdout."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..common import ROOT, Proc
from ..contender import py_module


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


class HitsPeer:
    """A Python peer whose consumers are processes of `module` reporting through hits files;
    no batched enqueue. Subclasses set `name`, `module` and `config`, and write the client
    side (open, enqueue_one, close; close ends with `release()`)."""

    name = ""
    module = ""
    config = ""
    has_batch = False

    def __init__(self, concurrency: int | None = None) -> None:
        #: None: the peer's own setting (its default or the tuned one); else equal settings.
        self.concurrency = concurrency
        self.procs: list[Proc] = []

    def consumer_args(self, url: str, queue: str) -> list[str]:
        """The consumer module's command-line arguments."""
        return [url, queue]

    def enqueue_many(self, items: list[Any]) -> None:
        raise NotImplementedError(f"{self.name} has no batched enqueue")

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        procs = [
            consumer(py_module(self.module, *self.consumer_args(url, queue)), self.name)
            for _ in range(workers)
        ]
        self.procs += procs
        return procs

    def release(self) -> None:
        """Remove the consumers' hits files."""
        cleanup(self.procs)
        self.procs = []
