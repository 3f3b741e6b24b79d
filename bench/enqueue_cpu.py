"""Batched enqueue's Redis CPU against the floor's, in one server: `python -m bench.enqueue_cpu`.

`bench.peers` measures each contender's batched enqueue once a repeat, 20,000 runs (~40 ms
of Redis CPU), so one noisy slice of the VM moves a ratio by 30 %. Here both enqueue into one
redis-server, in rounds: each round enqueues `--n` runs through `zsched.App.enqueue_many`
(the client as users get it: 1,000 runs a script call, envelopes tagged) and `--n` through
the floor's pipelined HSET + ZADD (bench/peers/bare.py), the order swapped every round, each
phase metered by INFO's CPU time. The ratio of a round is zsched's CPU a run over the floor's
in the same round; the median of the rounds is the reading. BENCHMARKS.md, "Session 23".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from .common import RedisServer, now_ms, payload
from .cost import Meter
from .peers.bare import Bare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n", type=int, default=20_000, help="runs a phase")
    ap.add_argument("--json", action="store_true", help="print the rounds as JSON")
    a = ap.parse_args()
    if a.rounds < 1 or a.n < 1:
        ap.error("--rounds and --n must be at least 1")
    import zsched

    with RedisServer("--save", "", "--appendonly", "no") as srv:
        app = zsched.App(srv.url, queue="cpu")
        floor = Bare()
        floor.open(srv.url, "cpu")
        meter = Meter(floor.r)  # type: ignore[arg-type]
        due = now_ms() + 3_600_000

        def run_zsched(base: int) -> None:
            app.enqueue_many(
                {
                    "task": "noop",
                    "payload": payload(due + base + i, i),
                    "run_at": (due + base + i) / 1000,
                }
                for i in range(a.n)
            )

        def run_floor(base: int) -> None:
            floor.enqueue_many([(due + base + i, payload(due + base + i, i)) for i in range(a.n)])

        rounds: list[dict[str, Any]] = []
        for r in range(a.rounds):
            got: dict[str, float] = {}
            order = [("zsched", run_zsched), ("floor", run_floor)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                meter.start()
                t = time.perf_counter()
                fn(r * a.n)
                wall = time.perf_counter() - t
                c = meter.stop()
                got[f"{name}_redis_us_per_run"] = 1e6 * c.cpu_s / a.n
                got[f"{name}_runs_per_s"] = a.n / wall
            got["ratio"] = got["zsched_redis_us_per_run"] / got["floor_redis_us_per_run"]
            rounds.append(got)
            print(f"round {r + 1}/{a.rounds}: zsched {got['zsched_redis_us_per_run']:.2f} us, "
                  f"floor {got['floor_redis_us_per_run']:.2f} us, ratio {got['ratio']:.2f}",
                  flush=True)  # fmt: skip
        app.close()
        floor.close()

    def med(key: str) -> float:
        return statistics.median(x[key] for x in rounds)

    print(f"median of {a.rounds} rounds of {a.n:,} runs: zsched {med('zsched_redis_us_per_run'):.2f} "
          f"us a run, floor {med('floor_redis_us_per_run'):.2f} us, ratio {med('ratio'):.2f} "
          f"(range {min(x['ratio'] for x in rounds):.2f}-{max(x['ratio'] for x in rounds):.2f})")  # fmt: skip
    if a.json:
        print(json.dumps(rounds))


if __name__ == "__main__":
    main()
