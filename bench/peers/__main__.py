"""`python -m bench.peers` (make bench-peers): the same workloads on zsched, the bare minimum
and each peer, interleaved in one run (workload by workload, contender by contender, repeated),
then a table of medians and of zsched's ratio to each.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import workloads as W
from ..common import median, write_results
from ..contender import Contender, Zsched
from ..machine import describe

PEERS = ["zsched", "bare", "bullmq", "celery", "saq", "arq", "rq"]


def equal(concurrency: int) -> dict[str, int]:
    """zsched's worker at equal settings C: C handlers and C entries per read, as the floor
    holds C and reads COUNT C (BENCHMARKS.md "What each workload measures"); the other
    settings are the CLI defaults, stated in the config line."""
    return {"concurrency": concurrency, "read_batch": concurrency}


def maker(name: str, concurrency: int | None) -> Callable[[], Contender]:
    """A contender at `concurrency` (equal settings) or at its own tuning (None). A peer's
    library is imported only when that peer runs, so zsched and the bare minimum run from
    zsched's own venv (`--only zsched bare`) without the peers' env. `zsched-cli` is zsched
    at the settings `zsched worker` / `zsched dispatcher` use with no flags."""
    if name == "zsched-cli":
        return lambda: Zsched(cli_defaults=True)
    if name == "zsched-async":  # the asyncio client on the enqueue side
        from ..contender import ZschedAsync

        return ZschedAsync
    if name == "zsched-one":  # the dispatcher inside the worker process
        w = equal(concurrency) if concurrency else None
        return lambda: Zsched(worker=w, cli_defaults=concurrency is not None, embedded=True)
    if name == "zsched":
        if concurrency is None:
            return Zsched
        return lambda: Zsched(worker=equal(concurrency), cli_defaults=True)
    module, cls = {
        "bare": (".bare", "Bare"),
        "bullmq": (".bullmq_peer", "BullMQ"),
        "celery": (".celery_peer", "CeleryPeer"),
        "saq": (".saq_peer", "Saq"),
        "arq": (".arq_peer", "Arq"),
        "rq": (".rq_peer", "RQ"),
    }[name]

    def make() -> Contender:
        from importlib import import_module

        return getattr(import_module(module, __package__), cls)(concurrency)  # type: ignore[no-any-return]

    return make


def contenders(
    names: list[str], concurrencies: list[int], tuned: bool
) -> dict[str, Callable[[], Contender]]:
    """Label -> maker: `name@C` at equal settings for each C, `name` at its own tuning, and
    `zsched-cli` and `zsched-async` (AsyncApp enqueues, CLI-default consumers) once when
    zsched runs."""
    out: dict[str, Callable[[], Contender]] = {}
    for c in concurrencies:
        out.update((f"{n}@{c}", maker(n, c)) for n in names)
    if tuned or not concurrencies:
        out.update((n, maker(n, None)) for n in names)
    if "zsched" in names:
        out["zsched-cli"] = maker("zsched-cli", None)
        out["zsched-async"] = maker("zsched-async", None)
    return out


E2E_COST = [
    ("drain_redis_us_per_run", False),
    ("drain_commands_per_run", False),
    ("consumer_cpu_us_per_run", False),
    ("drain_evalsha_per_run", False),
    ("drain_xreadgroup_per_run", False),
]
ENQ_COST = [
    (f"{p}_{m}", False) for p in ("one", "many") for m in ("redis_us_per_run", "commands_per_run")
]


#: workload -> (call, [(metric shown, True when higher is better)])
def workloads(
    quick: bool, n_e2e: int | None = None
) -> dict[str, tuple[Callable[[Contender], dict[str, Any]], list[tuple[str, bool]]]]:
    n = n_e2e or (2000 if quick else 20_000)
    return {
        "e2e": (
            lambda c: W.e2e(c, n, timeout=20 if quick else 60),
            [("runs_per_s", True), *E2E_COST],
        ),
        # The common handler: I/O-bound, milliseconds (bench/handler.py), every contender at
        # the same settings; what the worker's defaults are chosen for.
        "io_async": (
            lambda c: W.e2e(c, n, timeout=20 if quick else 60, handler="async:2"),
            [("runs_per_s", True), *E2E_COST],
        ),
        "io_sync": (
            lambda c: W.e2e(c, n, timeout=20 if quick else 60, handler="sync:2"),
            [("runs_per_s", True), *E2E_COST],
        ),
        "lag_200": (
            lambda c: W.lag(c, 200, 2 if quick else 5),
            [("p50_ms", False), ("p99_ms", False)],
        ),
        "enqueue": (
            lambda c: W.enqueue(c, 500 if quick else 2000, 5000 if quick else 20_000),
            [("one_per_s", True), ("many_per_s", True), *ENQ_COST],
        ),
        "idle": (
            lambda c: W.idle(c, 10_000, window_s=5 if quick else 15, warmup_s=5 if quick else 10),
            [("requests_per_s", False), ("commands_per_s", False), ("cpu_percent", False)],
        ),
        "memory": (lambda c: W.memory(c, 2000 if quick else 10_000), [("bytes_per_run", False)]),
    }


def fmt(v: float) -> str:
    if v != v:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def _ratios(
    medians: dict[str, dict[str, dict[str, float]]],
    wl: dict[str, tuple[Any, list[tuple[str, bool]]]],
    labels: list[str],
) -> None:
    """zsched's ratio to each contender of its own group (same `@C`, or the tuned group)."""
    print("\nzsched relative to each of its group (x > 1: zsched is better)")
    for label in labels:
        name, _, group = label.partition("@")
        z = f"zsched@{group}" if group else (label if label.startswith("zsched-") else "zsched")
        if label == z or z not in labels:
            continue
        cells = []
        for w, (_, metrics) in wl.items():
            for m, higher in metrics:
                zv, v = medians[w][z][m], medians[w][label][m]
                ok = bool(v and zv and v == v and zv == zv)
                cells.append(f"{w}.{m}={((zv / v) if higher else (v / zv)):.2f}x" if ok else "")
        print(f"  {z} / {label}: " + " ".join(c for c in cells if c))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.peers")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        help=f"contender names: {PEERS}, zsched-one, zsched-async",
    )
    ap.add_argument("--workloads", nargs="*", default=None)
    ap.add_argument(
        "--concurrency",
        type=int,
        nargs="*",
        default=[],
        help="equal settings: every contender at each of these concurrencies (e.g. 50 1000)",
    )
    ap.add_argument("--tuned", action="store_true", help="with --concurrency: the tuned table too")
    ap.add_argument("--n-e2e", type=int, default=None, help="runs in e2e (20,000; quick 2,000)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    makers = contenders(a.only or PEERS, a.concurrency, a.tuned)
    names = list(makers)
    wl = {k: v for k, v in workloads(a.quick, a.n_e2e).items() if k in (a.workloads or [k])}
    wnames = list(wl)
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
                r["loadavg"] = os.getloadavg()[0]
                runs[w][c].append(r)
                shown = ", ".join(f"{m}={fmt(float(r.get(m, float('nan'))))}" for m, _ in wl[w][1])
                print(f"  [{rep + 1}/{a.repeat}] {w:<8} {c:<12} {shown}", flush=True)
    medians = {
        w: {
            c: {m: median([float(r.get(m, float("nan"))) for r in runs[w][c]]) for m, _ in wl[w][1]}
            for c in names
        }
        for w in wnames
    }
    for c in names:
        print(f"{c:<14} {configs.get(c, '')}")
    print(f"\n{'workload':<34}" + "".join(f"{c:>13}" for c in names))
    for w in wnames:
        for m, _ in wl[w][1]:
            row = [medians[w][c][m] for c in names]
            print(f"{w + ' ' + m:<34}" + "".join(f"{fmt(v):>13}" for v in row))
    _ratios(medians, wl, names)
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
