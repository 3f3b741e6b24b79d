"""`python -m bench.peers.table RUN.json [RUN.json ...]`: the markdown tables of BENCHMARKS.md
from one or more `bench.peers` runs: per contender the median over every run of each metric
(the runs of one file are already interleaved; several files = several interleaved runs),
then each contender's ratio to the bare floor of its own group (same `@C`, or tuned).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..common import median

ROWS = [
    ("e2e", "runs_per_s", "e2e runs/s, due delayed runs"),
    ("e2e", "drain_redis_us_per_run", "drain: Redis CPU µs per run"),
    ("e2e", "drain_commands_per_run", "drain: Redis commands per run"),
    ("e2e", "consumer_cpu_us_per_run", "drain: consumer processes' CPU µs per run"),
    ("io_async", "runs_per_s", "io_async runs/s (the handler awaits 2 ms)"),
    ("io_async", "consumer_cpu_us_per_run", "io_async: consumer CPU µs per run"),
    ("io_sync", "runs_per_s", "io_sync runs/s (the handler blocks 2 ms)"),
    ("io_sync", "consumer_cpu_us_per_run", "io_sync: consumer CPU µs per run"),
    ("lag_200", "p50_ms", "fire lag p50 at 200 runs/s (ms)"),
    ("lag_200", "p99_ms", "fire lag p99 at 200 runs/s (ms)"),
    ("enqueue", "one_per_s", "enqueue runs/s, one call each"),
    ("enqueue", "one_redis_us_per_run", "one-call enqueue: Redis CPU µs per run"),
    ("enqueue", "one_commands_per_run", "one-call enqueue: Redis commands per run"),
    ("enqueue", "many_per_s", "enqueue runs/s, batched"),
    ("enqueue", "many_redis_us_per_run", "batched enqueue: Redis CPU µs per run"),
    ("enqueue", "many_commands_per_run", "batched enqueue: Redis commands per run"),
]


def collect(paths: list[str]) -> tuple[dict[str, dict[str, list[float]]], dict[str, str]]:
    """(contender -> 'workload.metric' -> every run's value, contender -> its config)."""
    vals: dict[str, dict[str, list[float]]] = {}
    configs: dict[str, str] = {}
    for p in paths:
        data: dict[str, Any] = json.loads(Path(p).read_text())
        configs.update(data["configs"])
        for w, per in data["runs"].items():
            for c, runs in per.items():
                for r in runs:
                    for m, v in r.items():
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            vals.setdefault(c, {}).setdefault(f"{w}.{m}", []).append(float(v))
    return vals, configs


def fmt(v: float) -> str:
    if v != v:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def table(vals: dict[str, dict[str, list[float]]], names: list[str]) -> str:
    out = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for w, m, label in ROWS:
        cells = [fmt(median(vals.get(c, {}).get(f"{w}.{m}", []))) for c in names]
        if any(x != "–" for x in cells):
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


RATIOS = [
    ("e2e", "runs_per_s", True, "e2e runs/s"),
    ("io_async", "runs_per_s", True, "io_async runs/s"),
    ("io_sync", "runs_per_s", True, "io_sync runs/s"),
    ("lag_200", "p99_ms", False, "lag p99"),
    ("e2e", "drain_redis_us_per_run", False, "drain Redis CPU/run"),
    ("enqueue", "one_redis_us_per_run", False, "one-call enqueue Redis CPU/run"),
    ("enqueue", "many_redis_us_per_run", False, "batched enqueue Redis CPU/run"),
]


def ratios(paths: list[str], names: list[str], z: str) -> str:
    """zsched's ratio to each contender of its group, computed inside each run (file), then
    the median over the runs: the figure the issue's goals are stated in (> 1: zsched better;
    for costs, the contender's figure over zsched's, so 0.4 = zsched costs 2.5x)."""
    per_run = []
    for p in paths:
        per_run.append(collect([p])[0])
    out = ["| zsched ÷ | " + " | ".join(n for n in names if n != z) + " |",
           "|---|" + "---:|" * (len(names) - 1)]  # fmt: skip
    for w, m, higher, label in RATIOS:
        cells = []
        for c in names:
            if c == z:
                continue
            rs = []
            for v in per_run:
                zv, cv = (
                    median(v.get(z, {}).get(f"{w}.{m}", [])),
                    median(v.get(c, {}).get(f"{w}.{m}", [])),
                )
                if zv == zv and cv == cv and zv and cv:
                    rs.append(zv / cv if higher else cv / zv)
            cells.append(f"{median(rs):.2f}×" if rs else "–")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    paths = argv if argv is not None else sys.argv[1:]
    vals, configs = collect(paths)
    groups: dict[str, list[str]] = {}
    for c in vals:
        groups.setdefault(c.partition("@")[2] or "tuned", []).append(c)
    for g, names in groups.items():
        print(f"\n### {g}\n")
        print(table(vals, names))
        print()
        z = f"zsched@{g}" if g != "tuned" else "zsched"
        if z in names:
            print()
            print(ratios(paths, names, z))
            print()
        floors = [c for c in vals if c.partition("@")[0] == "bare"]
        for variant in (
            "zsched-cli",
            "zsched-async",
        ):  # the CLI defaults' goal is against the floor
            if g == "tuned" and variant in names and floors:
                print()
                print(ratios(paths, [variant, *floors], variant))
                print()
        for c in names:
            n = len(vals[c].get("e2e.runs_per_s", []))
            size = median(vals[c].get("e2e.n", []))
            print(f"- {c} ({n} runs of e2e, n = {size:,.0f}): {configs.get(c, '')}")


if __name__ == "__main__":
    main()
