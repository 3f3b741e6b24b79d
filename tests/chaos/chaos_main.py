"""`make chaos`: one fault-injection run, its plan, its table; exit 1 if a property failed.

python tests/chaos/chaos_main.py [--seed N] [--runs 20000] [--seconds 60] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_checks import judge  # noqa: E402
from chaos_harness import run  # noqa: E402
from chaos_plan import Config  # noqa: E402

#: The version inside `make test`: every kind of fault, a shorter workload.
SMOKE = Config(
    runs=3_000,
    seconds=15.0,
    kill_every_s=1.5,
    zombies=1,
    redis_kills=2,
    redis_stops=1,
    redis_stop_s=6.0,  # past redis-py's 5 s socket timeout, so calls time out and retry
    script_flushes=1,
    client_kills=3,
    drain_timeout_s=30.0,
    snapshot_every_s=3.0,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None, help="fault plan seed (default: random)")
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--smoke", action="store_true", help="the short version run by make test")
    p.add_argument("--no-rules", action="store_true", help="delayed runs only")
    p.add_argument("--out", type=Path, default=None, help="keep logs and the AOF here")
    a = p.parse_args(argv)
    cfg = SMOKE if a.smoke else Config()
    seed = a.seed if a.seed is not None else random.randrange(1_000_000)
    changes: dict[str, object] = {"seed": seed}
    if a.runs is not None:
        changes["runs"] = a.runs
    if a.seconds is not None:
        changes["seconds"] = a.seconds
    if a.no_rules:
        changes["rules"] = False
    cfg = dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
    out = a.out or Path(tempfile.mkdtemp(prefix="zsched-chaos-"))
    obs = run(cfg, out)
    failures, table = judge(obs)
    print("\n".join(obs.fault_log))
    print(table)
    print(f"logs and AOF in {out}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("all properties held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
