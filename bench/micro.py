"""Server-side cost of the hot scripts, for profiling: `python -m bench.micro [N]`.

Reads INFO commandstats around each phase, so the figures are Redis's own time per call
(EVALSHA, the commands inside included), without the client or the network.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

from .common import client, now_ms, payload, server


def _evalsha(r: Any) -> tuple[int, int]:
    stats = r.info("commandstats")
    _evalsha.last = {k: (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}  # type: ignore[attr-defined]
    s = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(s["calls"]), int(s["usec"])


def _breakdown(before: dict[str, tuple[int, int]], runs: int) -> str:
    now = _evalsha.last  # type: ignore[attr-defined]
    rows = []
    for k, (c, u) in now.items():
        c0, u0 = before.get(k, (0, 0))
        if k != "cmdstat_evalsha" and u - u0 > 0:
            rows.append((u - u0, k[8:], c - c0))
    rows.sort(reverse=True)
    return "  ".join(f"{name} {u / runs:.2f}us/run({c})" for u, name, c in rows[:6])


def _phase(r: Any, label: str, runs: int, before: tuple[int, int]) -> dict[str, float]:
    prev = dict(_evalsha.last)  # type: ignore[attr-defined]
    calls, usec = _evalsha(r)
    c, u = calls - before[0], usec - before[1]
    row = {"calls": c, "us_per_call": u / max(c, 1), "us_per_run": u / max(runs, 1)}
    print(
        f"{label:<10} {c:>6} calls  {row['us_per_call']:>9.0f} us/call  "
        f"{row['us_per_run']:>6.2f} us/run  ({runs / max(u, 1) * 1e6:,.0f} runs/s in Redis)"
    )
    print("           inside: " + _breakdown(prev, runs))
    return row


def main(n: int = 200_000) -> dict[str, Any]:
    import zsched
    from zsched.observability.metrics import Metrics
    from zsched.store import scripts as S

    out: dict[str, Any] = {}
    with server() as srv:
        app = zsched.App(srv.url, queue="m" + uuid.uuid4().hex[:6], metrics=Metrics())
        r = client(srv.url)
        due = now_ms() - 1000
        b = _evalsha(r)
        for start in range(0, n, 10_000):
            app.enqueue_many(
                {"task": "noop", "payload": payload(due, start + i), "run_at": due / 1000}
                for i in range(10_000)
            )
        out["enqueue"] = _phase(r, "enqueue", n, b)

        async def dispatch_all() -> None:
            d = app.dispatcher(batch_size=1000, max_batches_per_tick=10_000, max_backlog=0)
            while (await d.tick()).moved:
                pass
            await d.close()

        b = _evalsha(r)
        asyncio.run(dispatch_all())
        out["dispatch"] = _phase(r, "dispatch", n, b)

        k = app.keys
        r.xgroup_create(k.ready, "workers", id="0")
        b = _evalsha(r)
        acked = 0
        while True:
            resp = r.xreadgroup("workers", "c1", {k.ready: ">"}, count=1000)
            if not resp:
                break
            pairs = [(e.decode(), f[b"run_id"].decode()) for e, f in resp[0][1]]
            app.scripts.run(S.ack(k, "c1", pairs, now_ms=None, dedupe_window_ms=3_600_000))
            acked += len(pairs)
        out["ack"] = _phase(r, "ack", acked, b)
        r.close()
        app.close()
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
