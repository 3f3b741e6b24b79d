"""The envelope's trace field across clients: the Node worker keeps it on a retry, and a trace
context written by hand (any client, JSON or msgpack) starts the Python worker's run span."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (make test installs it)")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once  # noqa: E402
from test_cross_language import dispatch, node_worker  # noqa: E402

from zsched.store import scripts as S  # noqa: E402


def _unset_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _unset_provider()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _unset_provider()


async def run_python_worker(app, real) -> int:
    w = app.worker(redis=real.async_client())
    try:
        return await w.tick()
    finally:
        await w.close()


async def test_a_node_retry_keeps_the_trace_and_the_python_attempt_joins_it(
    real, queue, node_dir, spans
) -> None:
    app = real.app(queue)
    ran = []

    @app.task(name="fail")  # the Node worker's "fail" handler fails; this one succeeds
    def fail(payload):
        ran.append(payload)

    with trace.get_tracer("shop").start_as_current_span("POST /order") as request:
        app.enqueue("fail", 7, run_id="n-1")
    await dispatch(app, real)
    (out,) = node_worker(node_dir, real.url, queue, "--max-attempts", "3", "--retry-delay-ms", "0")
    assert (out["outcome"], out["written"]) == ("retry", True)
    await dispatch(app, real)
    assert await run_python_worker(app, real) == 1
    assert ran == [7]
    (enq,) = [s for s in spans.get_finished_spans() if s.name == f"enqueue {queue}"]
    (run,) = [s for s in spans.get_finished_spans() if s.name == f"run {queue}"]
    assert run.attributes["zsched.attempt"] == 2
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent.span_id == enq.context.span_id
    assert [link.context.span_id for link in run.links] == [enq.context.span_id]


@pytest.mark.parametrize("form", ["json", "msgpack"])
async def test_a_trace_context_written_by_hand_starts_the_run_span(real, queue, spans, form):
    import msgpack

    app = real.app(queue)

    @app.task(name="greet")
    def greet(payload):
        pass

    tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    fields = {"v": 1, "run_id": "h-1", "task": "greet", "payload": None, "run_at_ms": 1,
              "trace": {"traceparent": f"00-{tid}-{sid}-01", "tracestate": "shop=1"}}  # fmt: skip
    raw = json.dumps(fields).encode() if form == "json" else msgpack.packb(fields)
    app.scripts.run(S.enqueue(app.keys, [("h-1", 1, "greet", raw)], now_ms=None,
                              dedupe_window_ms=60_000, max_envelope_bytes=10_000))  # fmt: skip
    await dispatch(app, real)
    assert await run_python_worker(app, real) == 1
    (run,) = [s for s in spans.get_finished_spans() if s.name == f"run {queue}"]
    assert f"{run.context.trace_id:032x}" == tid
    assert [f"{link.context.span_id:016x}" for link in run.links] == [sid]
    assert run.parent.trace_state.get("shop") == "1"
