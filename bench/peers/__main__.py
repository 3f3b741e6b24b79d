"""`python -m bench.peers` (make bench-peers): the same workloads on zsched, the bare minimum
and each peer, interleaved in one run (workload by workload, contender by contender, repeated),
then a table of medians and of zsched's ratio to each.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import workloads as W
from ..common import median, write_results
from ..contender import Contender, Zsched
from ..machine import describe


def contenders() -> dict[str, Callable[[], Contender]]:
    """Name -> maker. A peer's library is imported only when that peer runs, so zsched and the
    bare minimum run from zsched's own venv (`--only zsched bare`) without the peers' env."""

    def lazy(module: str, cls: str) -> Callable[[], Contender]:
        def make() -> Contender:
            from importlib import import_module

            return getattr(import_module(module, __package__), cls)()  # type: ignore[no-any-return]

        return make

    return {
        "zsched": Zsched,
        "bare": lazy(".bare", "Bare"),
        "bullmq": lazy(".bullmq_peer", "BullMQ"),
        "celery": lazy(".celery_peer", "CeleryPeer"),
        "saq": lazy(".saq_peer", "Saq"),
        "arq": lazy(".arq_peer", "Arq"),
        "rq": lazy(".rq_peer", "RQ"),
    }


#: workload -> (call, metrics shown, True when higher is better)
def workloads(
    quick: bool,
) -> dict[str, tuple[Callable[[Contender], dict[str, Any]], list[str], bool]]:
    n = 2000 if quick else 20_000
    return {
        "e2e": (lambda c: W.e2e(c, n, timeout=20 if quick else 60), ["runs_per_s"], True),
        "lag_200": (lambda c: W.lag(c, 200, 2 if quick else 5), ["p50_ms", "p99_ms"], False),
        "enqueue": (
            lambda c: W.enqueue(c, 500 if quick else 2000, 5000 if quick else 20_000),
            ["one_per_s", "many_per_s"],
            True,
        ),
        "idle": (
            lambda c: W.idle(c, 10_000, window_s=5 if quick else 15, warmup_s=5 if quick else 10),
            ["requests_per_s", "commands_per_s", "cpu_percent"],
            False,
        ),
        "memory": (lambda c: W.memory(c, 2000 if quick else 10_000), ["bytes_per_run"], False),
    }


def fmt(v: float) -> str:
    if v != v:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.peers")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    ap.add_argument("--only", nargs="*", default=None, help="contender names")
    ap.add_argument("--workloads", nargs="*", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    makers = contenders()
    names = a.only or list(makers)
    wl = workloads(a.quick)
    wnames = a.workloads or list(wl)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {w: {c: [] for c in names} for w in wnames}
    errors: list[str] = []
    configs = {}
    for rep in range(a.repeat):
        for w in wnames:
            call = wl[w][0]
            for c in names:
                contender = makers[c]()
                configs[c] = contender.config
                t = time.monotonic()
                try:
                    r = call(contender)
                except Exception as exc:  # noqa: BLE001 - one peer failing must not stop the run
                    errors.append(f"{w}/{c}: {exc!r}")
                    traceback.print_exc()
                    continue
                r["elapsed_s"] = time.monotonic() - t
                runs[w][c].append(r)
                shown = ", ".join(f"{m}={fmt(float(r.get(m, float('nan'))))}" for m in wl[w][1])
                print(f"  [{rep + 1}/{a.repeat}] {w:<8} {c:<7} {shown}", flush=True)
    medians = {
        w: {
            c: {m: median([float(r.get(m, float("nan"))) for r in runs[w][c]]) for m in wl[w][1]}
            for c in names
        }
        for w in wnames
    }
    print(f"\n{'workload':<26}" + "".join(f"{c:>11}" for c in names))
    for w in wnames:
        for m in wl[w][1]:
            row = [medians[w][c][m] for c in names]
            print(f"{w + ' ' + m:<26}" + "".join(f"{fmt(v):>11}" for v in row))
    if "zsched" in names:
        print("\nzsched relative to each (x > 1: zsched is better)")
        for w in wnames:
            higher = wl[w][2]
            for m in wl[w][1]:
                z = medians[w]["zsched"][m]
                cells = []
                for c in names:
                    v = medians[w][c][m]
                    ratio = (
                        (z / v if higher else v / z)
                        if v and z and v == v and z == z
                        else float("nan")
                    )
                    cells.append(f"{ratio:.2f}x" if ratio == ratio else "–")
                print(f"{w + ' ' + m:<26}" + "".join(f"{x:>11}" for x in cells))
    for e in errors:
        print("error:", e)
    result = {
        "machine": describe(),
        "configs": configs,
        "repeat": a.repeat,
        "quick": a.quick,
        "runs": runs,
        "medians": medians,
        "errors": errors,
    }
    write_results(a.out, "peers", result)
    return result


if __name__ == "__main__":
    main()
