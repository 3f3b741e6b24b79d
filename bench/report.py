"""Markdown tables for BENCHMARKS.md from the JSON that make bench / make bench-peers wrote.

`python -m bench.report bench-results/zsched-....json [bench-results/peers-....json]`
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .__main__ import SCENARIOS, fmt, met


def zsched_table(d: dict[str, Any]) -> str:
    rows = ["| scenario | metric | median | runs | target | met |", "|---|---|---:|---|---:|---|"]
    for name, (_f, _s, targets) in SCENARIOS.items():
        sc = d["scenarios"].get(name)
        if not sc:
            continue
        for metric, target, how in targets:
            med = sc["median"].get(metric, float("nan"))
            each = " / ".join(fmt(float(r[metric])) for r in sc["runs"] if metric in r)
            sign = ">=" if how == "ge" else "<="
            rows.append(
                f"| {name} | {metric} | {fmt(med)} | {each} | {sign} {fmt(float(target))} "
                f"| {met(med, target, how)} |"
            )
    return "\n".join(rows)


def peers_table(d: dict[str, Any]) -> str:
    med = d["medians"]
    names = list(next(iter(med.values())).keys())
    rows = ["| workload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for w, by in med.items():
        for m in next(iter(by.values())):
            rows.append(f"| {w} {m} | " + " | ".join(fmt(by[c][m]) for c in names) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="files written by make bench or make bench-peers")
    for path in ap.parse_args(argv).json:
        with open(path) as f:
            d = json.load(f)
        print(f"<!-- {path}: {d['machine']} -->")
        print(peers_table(d) if "medians" in d else zsched_table(d))
        print()


if __name__ == "__main__":
    main()
