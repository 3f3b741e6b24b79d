"""Where zsched's fire lag comes from: `python -m bench.lagprobe [--rate 200] [--seconds 10]`.

One private redis-server, one dispatcher and one worker process (bench/zsched_proc.py with
`--probe`), runs enqueued 1.5 s ahead at a steady rate as the fire-lag workload does. Each
process records its garbage-collection pauses (gc.callbacks) and its event-loop stalls (a 1 ms
ticker that notes how late it woke); the worker records, for every run, the intended time, the
dispatch time (RunInfo.dispatched_at, Redis's clock at the dispatch) and the handler call.
Printed: the lag split into dispatch (dispatched - intended) and delivery (handler -
dispatched) percentiles, the GC pauses and stalls, and the slowest runs with what overlapped
them. A diagnostic: the ticker itself costs each process ~1,000 wake-ups a second.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import glob
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import percentile


class Probe:
    """In a consumer process: GC pauses, event-loop stalls and (worker) per-run timestamps."""

    def __init__(self, prefix: str, role: str) -> None:
        self.prefix, self.role = prefix, role
        self.gc: list[tuple[float, float, int]] = []  # (epoch start, ms, generation)
        #: (epoch, ms late, ms of this process's CPU in that time): CPU near the lateness is
        #: synchronous work on the loop; none is time off the CPU (the host's scheduler).
        self.stalls: list[tuple[float, float, float]] = []
        self.runs: list[tuple[float, float, float]] = []  # (handler, intended, dispatched) s
        self._gc_t = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t = time.perf_counter()
        else:
            ms = (time.perf_counter() - self._gc_t) * 1000
            self.gc.append((time.time(), ms, int(info["generation"])))

    def start(self) -> None:
        asyncio.get_running_loop().create_task(self._ticker())

    async def _ticker(self) -> None:
        while True:
            t, cpu = time.perf_counter(), time.process_time()
            await asyncio.sleep(0.001)
            late = (time.perf_counter() - t) * 1000 - 1.0
            if late > 1.0:
                self.stalls.append((time.time(), late, (time.process_time() - cpu) * 1000))

    def run(self, payload: Any) -> None:
        from zsched.worker.tasks import current_run

        info = current_run()
        d = info.dispatched_at.timestamp() if info.dispatched_at else float("nan")
        self.runs.append((time.time(), float(payload["at"]) / 1000, d))  # type: ignore[index]

    def dump(self) -> None:
        data = {"role": self.role, "gc": self.gc, "stalls": self.stalls, "runs": self.runs}
        Path(f"{self.prefix}.{self.role}.{os.getpid()}").write_text(json.dumps(data))


def _pcts(xs: list[float]) -> str:
    return " / ".join(f"{percentile(xs, p):.2f}" for p in (50, 90, 99)) + f" / max {max(xs):.2f}"


def analyse(prefix: str) -> dict[str, Any]:
    procs = [json.loads(Path(f).read_text()) for f in sorted(glob.glob(prefix + ".*"))]
    runs = [r for p in procs for r in p["runs"]]
    total = [(h - at) * 1000 for h, at, _ in runs]
    disp = [(d - at) * 1000 for _, at, d in runs]
    deliv = [(h - d) * 1000 for h, _, d in runs]
    print(f"runs {len(runs)}; ms p50 / p90 / p99 / max")
    print(f"  lag      {_pcts(total)}")
    print(f"  dispatch {_pcts(disp)}   (dispatched_at is Redis's clock in whole ms)")
    print(f"  delivery {_pcts(deliv)}")
    out: dict[str, Any] = {"n": len(runs), "total": total, "dispatch": disp, "delivery": deliv}
    events: list[tuple[float, float, str]] = []
    for p in procs:
        by_gen: dict[int, list[float]] = {}
        for _, ms, g in p["gc"]:
            by_gen.setdefault(g, []).append(ms)
        for g, ms in sorted(by_gen.items()):
            print(f"  {p['role']:<10} gc gen{g}: {len(ms)} pauses, max {max(ms):.2f} ms, "
                  f"sum {sum(ms):.1f} ms")  # fmt: skip
        st = [ms for _, ms, _ in p["stalls"]]
        if st:
            big = [(ms, cpu) for _, ms, cpu in p["stalls"] if ms > 5]
            on = sum(cpu for _, cpu in big) / max(1e-9, sum(ms for ms, _ in big))
            print(f"  {p['role']:<10} loop stalls > 1 ms: {len(st)}, {_pcts(st)}; of those "
                  f"> 5 ms ({len(big)}), {on:.0%} of the time was on the CPU")  # fmt: skip
        events += [(t, ms, f"{p['role']} gc{g}") for t, ms, g in p["gc"] if ms > 0.5]
        events += [(t, ms, f"{p['role']} stall") for t, ms, _ in p["stalls"]]
    print("  slowest runs (lag = dispatch + delivery ms; events within 20 ms before the call):")
    worst = sorted(runs, key=lambda r: r[0] - r[1], reverse=True)[: max(10, len(runs) // 100)]
    for h, at, d in worst:
        near = [f"{name} {ms:.1f}" for t, ms, name in events if h - 0.02 <= t <= h + 0.002]
        print(f"    {1000 * (h - at):6.2f} = {1000 * (d - at):5.1f} + {1000 * (h - d):5.2f}  "
              f"{', '.join(near[:4])}")  # fmt: skip
    return out


def main() -> None:
    from . import workloads as W
    from .contender import Zsched

    ap = argparse.ArgumentParser(prog="python -m bench.lagprobe")
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cli-defaults", action="store_true", help="zsched at the CLI defaults")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zsched-probe-") as tmp:
        prefix = str(Path(tmp) / "probe")

        class Probed(Zsched):
            def consumers(self, url: str, queue: str, workers: int, lags: Any) -> Any:
                procs = super().consumers(url, queue, workers, lags)
                for p in procs:
                    p.argv += ["--probe", prefix]
                return procs

        r = W.lag(Probed(cli_defaults=a.cli_defaults), a.rate, a.seconds)
        print(f"workload: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, load "
              f"{os.getloadavg()[0]:.1f}")  # fmt: skip
        analyse(prefix)


if __name__ == "__main__":
    main()
