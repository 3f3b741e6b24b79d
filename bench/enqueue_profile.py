"""Callgrind of batched enqueue alone, its dump kept: `python -m bench.enqueue_profile OUT`.

Warms a tree with 5,000 runs, then counts `--m` more (1,000 a call) and copies that phase's
dump to OUT/batched.out for `callgrind_annotate` (redis-server is stripped: resolve hot
addresses with `objdump -d`). `--tagged` sends envelopes with their due tag as the clients do,
`--rand` random payload padding, `--floor` the bare floor's pipelined HSET + ZADD instead,
`--lua DIR` enqueue.lua from another tree. BENCHMARKS.md, "Session 16".
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from zsched.store.delayed import tag

from .common import now_ms, payload
from .instructions import callgrind_server, floor_enqueue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--lua", default=None)
    ap.add_argument("--m", type=int, default=5000, help="runs counted")
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--rand", action="store_true")
    ap.add_argument("--tagged", action="store_true")
    a = ap.parse_args()
    from zsched.protocol.envelope import Envelope
    from zsched.protocol.keys import QueueKeys
    from zsched.store import scripts as S

    lua = Path(a.lua) if a.lua else S.lua_dir()
    os.makedirs(a.out, exist_ok=True)
    with callgrind_server(a.out) as (r, cost):
        sha = r.script_load((lua / "enqueue.lua").read_text())
        k = QueueKeys("i")
        keys = [k.delayed, k.runs, k.done, k.stats, k.wake]
        due = now_ms() + 3_600_000

        def env(i: int) -> bytes:
            p = payload(due + i, i)
            if a.rand:
                p["pad"] = os.urandom(40).hex()
            return Envelope(uuid.uuid4().hex, "noop", p, due, due, due).encode()

        def batch(base: int, m: int) -> None:
            for s in range(0, m, 1000):
                ats = range(s, min(m, s + 1000))
                if a.floor:
                    floor_enqueue(r, [(due + base + i, payload(due + i, i)) for i in ats])
                    continue
                args: list[Any] = []
                for i in ats:
                    e, at = env(i), due + base + i
                    args += [uuid.uuid4().hex, at, "noop", tag(at, e) if a.tagged else e]
                r.evalsha(sha, 5, *keys, "", 86_400_000, 1 << 20, *args)

        batch(0, 5000)
        cost()
        batch(10_000, a.m)
        ir, calls = cost()
        print(f"{ir / a.m:,.0f} instructions/run  {calls / a.m:.2f} commands/run")
        files = sorted(glob.glob(f"{a.out}/cg.*.out.*"), key=os.path.getmtime)
        shutil.copy(files[-1], f"{a.out}/batched.out")


if __name__ == "__main__":
    main()
