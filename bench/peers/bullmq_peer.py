"""BullMQ (Node.js) through bench/peers/bullmq_bench.js: a producer process fed over stdin."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..common import Proc
from ..contender import Item
from .base import cleanup

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE / "bullmq_bench.js")
CONCURRENCY = 100


class BullMQ:
    name = "bullmq"
    has_batch = True
    config = (
        f"1 Node worker process, concurrency {CONCURRENCY}, removeOnComplete 1000, no prefetch (each slot "
        "fetches its next job); delayed jobs (delay >= 1 ms), addBulk of 1000 for batches"
    )

    def __init__(self, concurrency: int | None = None) -> None:
        self.concurrency = concurrency or CONCURRENCY
        self.config = (
            f"1 Node worker process, concurrency {self.concurrency}, removeOnComplete 1000, no "
            "prefetch (each slot fetches its next job); delayed jobs (delay >= 1 ms), addBulk "
            "of 1000 for batches"
        )
        self.url = ""
        self.queue = ""
        self.producer: subprocess.Popen[str] | None = None
        self.procs: list[Proc] = []

    def open(self, url: str, queue: str) -> None:
        self.url, self.queue = url, queue

    def _producer(self) -> subprocess.Popen[str]:
        if self.producer is None:
            self.producer = subprocess.Popen(
                ["node", SCRIPT, "producer", self.url, self.queue],
                cwd=HERE,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert self.producer.stdout
            if self.producer.stdout.readline().strip() != "ready":
                raise RuntimeError("bullmq producer did not start")
        return self.producer

    def enqueue_one(self, due_ms: int, payload: dict[str, Any]) -> None:
        self.enqueue_many([(due_ms, payload)])

    def enqueue_many(self, items: list[Item]) -> None:
        p = self._producer()
        assert p.stdin and p.stdout
        p.stdin.write(json.dumps(items) + "\n")
        p.stdin.flush()
        if p.stdout.readline().strip() != "ok":
            raise RuntimeError("bullmq producer failed")

    def _enqueue_rate(self, n_one: int, n_many: int) -> dict[str, Any]:
        out = subprocess.run(
            ["node", SCRIPT, "enqueue-rate", self.url, self.queue, str(n_one), str(n_many)],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def measure_enqueue(self, n_one: int, n_many: int, meter: Any = None) -> dict[str, Any]:
        """One Node process per phase; Redis's cost of a phase is that process's less the
        cost of a process that only connects and adds its one warm-up job."""
        if meter is None:
            res = self._enqueue_rate(n_one, n_many)
            self.close()
            return {**res, "n_one": n_one, "n_many": n_many}
        meter.start()
        self._enqueue_rate(0, 0)
        base = meter.stop()
        res: dict[str, Any] = {"n_one": n_one, "n_many": n_many}
        for n, phase, key in ((n_one, "one", "one_per_s"), (n_many, "many", "many_per_s")):
            meter.start()
            r = self._enqueue_rate(n if phase == "one" else 0, n if phase == "many" else 0)
            res[key] = r[key]
            res.update((meter.stop() - base).per_run(n, phase))
        self.close()
        return res

    def consumers(self, url: str, queue: str, workers: int, lags: Path | None) -> list[Proc]:
        procs = []
        for _ in range(workers):
            fd, path = tempfile.mkstemp(prefix="zsched-bench-bullmq-", suffix=".hits")
            os.close(fd)
            procs.append(
                Proc(
                    ["node", SCRIPT, "worker", url, queue, path, str(self.concurrency)],
                    cwd=str(HERE),
                    hits=Path(path),
                )
            )
        self.procs += procs
        return procs

    def close(self) -> None:
        if self.producer is not None:
            if self.producer.stdin:
                self.producer.stdin.close()
            try:
                self.producer.wait(10)
            except subprocess.TimeoutExpired:
                self.producer.kill()
                self.producer.wait()
            if self.producer.stdout:
                self.producer.stdout.close()
            self.producer = None
        cleanup(self.procs)
        self.procs = []
