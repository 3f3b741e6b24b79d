"""`python -m bench` (make bench): every scenario of the issue against private redis-servers.

Each scenario runs `--repeat` times (3 by default) and the table shows the median; all runs and
the machine description go to bench-results/zsched-<time>.json. `--smoke` runs tiny sizes
once (the test suite uses it to check that every scenario completes and yields numbers).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

from . import scale, workloads
from .common import median, write_results
from .contender import Zsched
from .machine import describe

#: name -> (full-size call, smoke-size call, [(metric, target, "ge"|"le")])
Scenario = tuple[
    Callable[[], dict[str, Any]], Callable[[], dict[str, Any]], list[tuple[str, float, str]]
]

SCENARIOS: dict[str, Scenario] = {
    "e2e_1_worker": (
        lambda: workloads.e2e(Zsched(), 20_000, workers=1),
        lambda: workloads.e2e(Zsched(), 300, workers=1),
        [("runs_per_s", 30_000, "ge")],
    ),
    "e2e_2_workers": (
        lambda: workloads.e2e(Zsched(), 40_000, workers=2),
        lambda: workloads.e2e(Zsched(), 300, workers=2),
        [("runs_per_s", 30_000, "ge")],
    ),
    "lag_200_per_s": (
        lambda: workloads.lag(Zsched(), rate=200, seconds=10),
        lambda: workloads.lag(Zsched(), rate=200, seconds=0.5, lead_s=0.5),
        [("p50_ms", 2, "le"), ("p99_ms", 5, "le")],
    ),
    "lag_5000_per_s": (
        lambda: workloads.lag(Zsched(), rate=5000, seconds=6),
        lambda: workloads.lag(Zsched(), rate=1000, seconds=0.5, lead_s=0.5),
        [("p99_ms", 20, "le")],
    ),
    "enqueue": (
        lambda: workloads.enqueue(Zsched(), n_one=5000, n_many=100_000),
        lambda: workloads.enqueue(Zsched(), n_one=100, n_many=2000),
        [("one_per_s", 10_000, "ge"), ("many_per_s", 80_000, "ge")],
    ),
    "idle": (
        lambda: workloads.idle(Zsched(), 10_000, window_s=30),
        lambda: workloads.idle(Zsched(), 100, window_s=0.5, warmup_s=0.2),
        [("requests_per_s", 1, "le"), ("commands_per_s", 1, "le"), ("cpu_percent", 0.5, "le")],
    ),
    "idle_tuned": (
        lambda: workloads.idle(Zsched(dispatcher={"max_idle_ms": 30_000}), 10_000, window_s=30),
        lambda: workloads.idle(
            Zsched(dispatcher={"max_idle_ms": 30_000}), 100, window_s=0.5, warmup_s=0.2
        ),
        [("requests_per_s", 1, "le"), ("commands_per_s", 1, "le"), ("cpu_percent", 0.5, "le")],
    ),
    "memory": (
        lambda: workloads.memory(Zsched(), 10_000),
        lambda: workloads.memory(Zsched(), 500),
        [("bytes_per_run", 300, "le")],
    ),
    "memory_drain": (
        lambda: scale.memory_drain(10_000),
        lambda: scale.memory_drain(300, dedupe_ms=300),
        [("residual_per_run_b", 5, "le")],
    ),
    "scale_1m": (
        lambda: scale.scale(1_000_000),
        lambda: scale.scale(3000, chunk=1000),
        [
            ("dispatch_per_s", 200_000, "ge"),
            ("enqueue_flatness", 0.8, "ge"),
            ("slow_scripts", 0, "le"),
            ("drain_ping_p99_ms", 10, "le"),
            ("dispatch_ping_p99_ms", 10, "le"),
        ],
    ),
}


def met(value: float, target: float, how: str) -> str:
    if value != value:
        return "?"
    return "yes" if (value >= target if how == "ge" else value <= target) else "NO"


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"
    return str(v)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run each")
    ap.add_argument("--repeat", type=int, default=None, help="runs per scenario (default 3)")
    ap.add_argument("--only", nargs="*", default=None, help="scenario names")
    ap.add_argument("--out", default=None, help="JSON path (default bench-results/...)")
    a = ap.parse_args(argv)
    repeat = a.repeat or (1 if a.smoke else 3)
    names = a.only or list(SCENARIOS)
    results: dict[str, Any] = {
        "machine": describe(),
        "smoke": a.smoke,
        "repeat": repeat,
        "config": Zsched().config,
        "scenarios": {},
    }
    # Interleave repetitions (scenario A, B, C, A, B, C ...) so drift hits every scenario alike.
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(repeat):
        for name in names:
            full, smoke, _targets = SCENARIOS[name]
            t = time.monotonic()
            r = (smoke if a.smoke else full)()
            r["elapsed_s"] = time.monotonic() - t
            runs[name].append(r)
            print(f"  {name}: " + ", ".join(f"{k}={fmt(v)}" for k, v in r.items()), flush=True)
    print(f"\n{'scenario':<16} {'metric':<26} {'median':>12} {'target':>10}  met")
    for name in names:
        _f, _s, targets = SCENARIOS[name]
        keys = [k for k, v in runs[name][0].items() if isinstance(v, int | float)]
        med = {k: median([float(r[k]) for r in runs[name] if k in r]) for k in keys}
        results["scenarios"][name] = {"runs": runs[name], "median": med}
        for metric, target, how in targets:
            sign = ">=" if how == "ge" else "<="
            print(
                f"{name:<16} {metric:<26} {fmt(med.get(metric, float('nan'))):>12} "
                f"{sign}{fmt(float(target)):>8}  {met(med.get(metric, float('nan')), target, how)}"
            )
    write_results(a.out, "zsched", results)
    return results


if __name__ == "__main__":
    main()
