"""What the tracing hooks cost per enqueue and per run: `python -m bench.tracing_overhead`.

No Redis: it times the hooks App.enqueue and the worker call (zsched/observability/tracing.py) and
App.build (the envelope), in three states: OpenTelemetry not loaded, loaded without a tracer
provider (redis-py loads it when it is installed), and a provider that records spans. The
figures are in BENCHMARKS.md ("Tracing overhead").
"""

from __future__ import annotations

import sys
import time
from typing import Any

from zsched.app import App
from zsched.observability import tracing
from zsched.protocol.envelope import Envelope

N = 200_000


def per_call_ns(fn: Any, n: int = N) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def hooks(app: App, env: Envelope) -> dict[str, float]:
    def enqueue_hook() -> None:
        with tracing.enqueue_span("q") as span:
            span.enqueued(["r"], 0)

    def build() -> None:
        app.build("t", {"a": 1}, run_id="r")

    def run_hook() -> None:
        tracing.end_attempt(tracing.start_attempt(env, "q", 1, "1800000000000-0", 1))
        tracing.event("zsched.retry", delay_s=1.0)

    return {
        "enqueue hook": per_call_ns(enqueue_hook, N // 10),
        "App.build": per_call_ns(build, N // 10),
        "run hook": per_call_ns(run_hook, N // 10),
    }


def enqueue_round_trip(url: str) -> None:
    """App.enqueue on a real Redis, with the hooks as shipped and with them cut out (the code
    before tracing): the hooks' share of one enqueue."""
    import zsched.app_core as app_module

    app = App(url, queue="bench-tracing")
    n = 5_000
    shipped = per_call_ns(lambda: app.enqueue("t", {"a": 1}), n)
    real = app_module._tracing
    app_module._tracing = type(
        "NoHooks", (), {"enqueue_span": staticmethod(lambda *a: tracing.OFF)}
    )  # type: ignore[assignment]
    try:
        cut = per_call_ns(lambda: app.enqueue("t", {"a": 1}), n)
    finally:
        app_module._tracing = real
    print(
        f"App.enqueue round trip: {shipped / 1000:.1f} us with the hooks, {cut / 1000:.1f} us without"
    )
    app.redis.delete(*app.keys.all_fixed())


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--redis":
        enqueue_round_trip(sys.argv[2])
    app = App("redis://127.0.0.1:1/0", queue="q")
    env = Envelope("r", "t", None, 1, 1, 1)
    saved = {m: sys.modules.pop(m) for m in list(sys.modules) if m == "opentelemetry.trace"}
    rows = {"OpenTelemetry not loaded": hooks(app, env)}
    sys.modules.update(saved)
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    rows["loaded, no tracer provider"] = hooks(app, env)
    trace.set_tracer_provider(TracerProvider())  # records spans, exports none
    rows["tracer provider set (spans recorded)"] = hooks(app, env)
    width = max(map(len, rows))
    print(f"{'':{width}}  " + "  ".join(f"{k:>14}" for k in next(iter(rows.values()))))
    for name, r in rows.items():
        print(f"{name:{width}}  " + "  ".join(f"{v:>11.0f} ns" for v in r.values()))


if __name__ == "__main__":
    main()
