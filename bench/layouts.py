"""Redis memory per delayed run under other key layouts: what the memory target would take.

    .venv/bin/python -m bench.layouts [--n 100000]

Each layout is written with plain commands (pipelined) into its own private redis-server,
`n` runs an hour ahead with the benchmark's ~110-byte payload, measured as used_memory over
a warmed-up baseline. The first row is zsched's real `enqueue_many` (key layout 3: the
delayed set as a B-tree of listpack ZSETs, since zsched 0.2); the "ZSET + HASH, v2 envelope"
row is key layout 2, zsched 0.1's. BENCHMARKS.md (memory) quotes this table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import msgpack

from zsched import App
from zsched.protocol.envelope import Envelope as RunEnvelope
from zsched.protocol.envelope import encode_first
from zsched.protocol.runids import fresh_run_id

from .common import client, now_ms, payload, server, used_memory
from .workloads import HOUR_MS

Envelope = Callable[[str, int], bytes]


def v1(rid: str, due: int) -> bytes:
    """The version 1 map zsched wrote before (same fields, by name, with the run id)."""
    return msgpack.packb(RunEnvelope(rid, "noop", payload(due, 1), due, due, now_ms()).as_fields())


def v2(rid: str, due: int) -> bytes:
    return encode_first("noop", payload(due, 1), due, now_ms())


def bare(rid: str, due: int) -> bytes:
    return msgpack.packb(payload(due, 1))


def _per_run(write: Callable[[Any, int, int], None], n: int, config: dict[str, str]) -> float:
    with server() as srv:
        r = client(srv.url)
        for k, v in config.items():
            r.config_set(k, v)
        write(r, 0, 1000)
        base = used_memory(r)
        write(r, 1000, 1000 + n)
        return (used_memory(r) - base) / n


def layout(env: Envelope | None, bucket: int = 0) -> Callable[[Any, int, int], None]:
    """ZSET delayed (run id -> due) plus, unless `env` is None, the envelope in `runs`: one
    HASH, or (bucket > 0) HASHes of `bucket` runs each."""
    due0 = now_ms() + HOUR_MS

    def write(r: Any, lo: int, hi: int) -> None:
        p = r.pipeline(transaction=False)
        for i in range(lo, hi):
            rid, due = fresh_run_id(), due0 + i
            p.zadd("delayed", {rid: due})
            if env is not None:
                p.hset(f"runs:{i // bucket}" if bucket else "runs", rid, env(rid, due))
            if i % 1000 == 999:
                p.execute()
        p.execute()

    return write


def zsched_enqueue(r: Any, lo: int, hi: int) -> None:
    app = App(redis=r, queue="q")
    due0 = now_ms() + HOUR_MS
    for j in range(lo, hi, 1000):
        app.enqueue_many([{"task": "noop", "payload": payload(due0 + i, 1), "run_at": (due0 + i) / 1000}
                          for i in range(j, min(hi, j + 1000))])  # fmt: skip


LISTPACK = {"hash-max-listpack-value": "512"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.layouts", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="runs per layout (default 100000)")
    n = ap.parse_args(argv).n
    rows: list[tuple[str, Callable[[Any, int, int], None], dict[str, str]]] = [
        ("zsched enqueue_many (key layout 3, v2 envelope)", zsched_enqueue, {}),
        ("ZSET + HASH, v2 envelope (zsched 0.1, key layout 2)", layout(v2), {}),
        ("ZSET + HASH, v1 map envelope (before session 3)", layout(v1), {}),
        ("ZSET + HASH, payload only (bare minimum)", layout(bare), {}),
        ("ZSET alone", layout(None), {}),
        ("ZSET + 128-run listpack HASHes, v2 envelope *", layout(v2, 128), LISTPACK),
        ("ZSET + 32-run listpack HASHes, v2 envelope *", layout(v2, 32), LISTPACK),
        ("ZSET + 128-run listpack HASHes, payload only *", layout(bare, 128), LISTPACK),
    ]
    print(f"| layout ({n:,} runs an hour ahead, ~110-byte payload) | bytes per run |")
    print("|---|---:|")
    for name, write, config in rows:
        print(f"| {name} | {_per_run(write, n, config):.0f} |", flush=True)
    print("\n* with the server setting hash-max-listpack-value 512 (default 64)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
