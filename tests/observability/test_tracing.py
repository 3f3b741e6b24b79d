"""OpenTelemetry tracing from an HTTP-style request through enqueue to the handler.

The SDK's in-memory exporter collects the spans. The global tracer provider is set for each
test and taken away after it (OpenTelemetry allows one per process), so the rest of the suite
runs without tracing, as an application without a provider does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra (make test installs it)")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

import zsched  # noqa: E402
from zsched.observability import tracing  # noqa: E402
from zsched.protocol.envelope import decode  # noqa: E402


def _unset_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


def install(exporter: SpanExporter) -> TracerProvider:
    _unset_provider()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = install(exporter)
    yield exporter
    provider.shutdown()
    _unset_provider()


def by_name(exporter: InMemorySpanExporter, name: str) -> list:
    return sorted((s for s in exporter.get_finished_spans() if s.name == name),
                  key=lambda s: s.start_time)  # fmt: skip


async def run_all(app, real) -> None:
    d, w = app.dispatcher(redis=real.async_client()), app.worker(redis=real.async_client())
    try:
        for _ in range(3):  # the first attempt, then its retry
            await d.tick()
            await w.tick()
    finally:
        await d.close()
        await w.close()


async def test_one_trace_from_the_request_through_enqueue_to_a_retried_handler(
    real, queue, spans
) -> None:
    app = real.app(queue)
    attempts: list[int] = []
    tracer = trace.get_tracer("shop")

    @app.task(name="charge", backoff=0)
    def charge(payload):  # sync: runs in the worker's thread
        attempt = zsched.current_run().attempt
        attempts.append(attempt)
        with tracer.start_as_current_span("call the bank"):
            if attempt == 1:
                raise ConnectionError("bank unreachable")

    with tracer.start_as_current_span("POST /checkout", kind=SpanKind.SERVER) as request:
        app.enqueue("charge", {"order": 7}, run_id="order-7")
    raw = app.redis.hget(app.keys.runs, "order-7")
    assert "traceparent" in decode(raw[7:], "order-7").trace  # the due tag is 7 bytes
    await run_all(app, real)
    assert attempts == [1, 2]

    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {trace_id}
    (enq,) = by_name(spans, f"enqueue {queue}")
    assert (
        enq.kind is SpanKind.PRODUCER and enq.parent.span_id == request.get_span_context().span_id
    )
    assert enq.attributes["messaging.system"] == "zsched"
    assert enq.attributes["messaging.operation.type"] == "send"
    assert enq.attributes["messaging.destination.name"] == queue
    assert enq.attributes["messaging.message.id"] == "order-7"
    dispatches = by_name(spans, f"dispatch {queue}")
    assert [s.parent.span_id for s in dispatches] == [enq.context.span_id] * 2
    runs = by_name(spans, f"run {queue}")
    assert [s.attributes["zsched.attempt"] for s in runs] == [1, 2]
    for run in runs:
        assert run.kind is SpanKind.CONSUMER
        assert run.parent.span_id == enq.context.span_id
        assert [link.context.span_id for link in run.links] == [enq.context.span_id]
        assert run.attributes["zsched.run_id"] == "order-7"
        assert run.attributes["zsched.task"] == "charge"
        assert run.attributes["messaging.operation.type"] == "process"
        assert "zsched.schedule_id" not in run.attributes
    first, second = runs
    assert [e.name for e in first.events] == ["zsched.retry"]
    assert "bank unreachable" in first.events[0].attributes["reason"]
    assert first.status.status_code is StatusCode.ERROR
    assert second.events == () and second.status.status_code is StatusCode.UNSET
    banks = by_name(spans, "call the bank")  # the handler's own spans, in its thread
    assert [b.parent.span_id for b in banks] == [r.context.span_id for r in runs]


async def test_a_dead_letter_is_an_event_and_a_rule_fire_names_its_rule(real, queue, spans) -> None:
    clock = zsched.FakeClock(1_800_000_000_000)
    app = real.app(queue, clock=clock)

    @app.task(name="bad", max_attempts=1)
    async def bad(payload):
        raise zsched.Fail("no such customer")

    app.enqueue("bad", None, run_id="b-1")
    app.schedule("every-minute", "bad", every=60)
    clock.advance(60_000)
    await run_all(app, real)
    runs = {s.attributes["zsched.run_id"]: s for s in by_name(spans, f"run {queue}")}
    assert [e.name for e in runs["b-1"].events] == ["zsched.dead_letter"]
    assert runs["b-1"].events[0].attributes["kind"] == "failed"
    (fire,) = [s for rid, s in runs.items() if rid != "b-1"]
    assert fire.attributes["zsched.schedule_id"] == "every-minute"
    assert fire.parent is None and fire.links == ()  # a fire has no enqueue to link to


async def test_a_provider_set_after_the_worker_is_built_traces_its_first_runs(real, queue) -> None:
    # The worker looks the provider up once per read pass, not per run: its first pass starts
    # a reclaimed run before it reads, and that run is traced too.
    from zsched.protocol.keys import GROUP

    app = real.app(queue)
    ran = []

    @app.task(name="t")
    async def t(payload):
        ran.append(payload)

    app.enqueue("t", 1, run_id="r-1")
    d, w = app.dispatcher(redis=real.async_client()), app.worker(redis=real.async_client())
    exporter = InMemorySpanExporter()
    try:
        await d.tick()
        await w.setup()
        [[_s, [(entry_id, _f)]]] = real.sync.xreadgroup(GROUP, "gone", {app.keys.ready: ">"})
        # a dead worker's hold, idle for longer than the visibility timeout
        real.sync.xclaim(app.keys.ready, GROUP, "gone", 0, [entry_id], idle=10**9, justid=True)
        provider = install(exporter)
        assert await w.reader.tick() == 1  # reclaimed and started
        await w.drain()
        assert ran == [1]
        (span,) = by_name(exporter, f"run {queue}")
        assert span.attributes["zsched.run_id"] == "r-1"
        provider.shutdown()
    finally:
        _unset_provider()
        await d.close()
        await w.close()


def test_enqueue_many_carries_one_producer_span(real, queue, spans) -> None:
    app = real.app(queue)
    app.enqueue_many([{"task": "t", "run_id": f"m{i}"} for i in range(3)])
    (enq,) = by_name(spans, f"enqueue {queue}")
    assert enq.attributes["messaging.batch.message_count"] == 3
    for i in range(3):
        env = decode(app.redis.hget(app.keys.runs, f"m{i}")[7:], f"m{i}")
        assert f"-{enq.context.span_id:016x}-" in env.trace["traceparent"]


def test_without_a_provider_nothing_is_added_to_the_envelope(real, queue) -> None:
    assert not tracing.active()
    assert tracing.enqueue_span(queue) is tracing.OFF
    app = real.app(queue)
    app.enqueue("t", 1, run_id="plain")
    raw = app.redis.hget(app.keys.runs, "plain")[7:]
    assert len(msgpack.unpackb(raw)) == 5 and decode(raw, "plain").trace is None


def test_zsched_imports_no_opentelemetry_of_its_own() -> None:
    # redis-py imports OpenTelemetry when it is installed (its own observability); zsched adds
    # nothing to that, with or without the extra.
    code = ("import sys, redis\n"
            "before = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
            "import zsched, zsched.worker.worker, zsched.observability.tracing as t\n"
            "app = zsched.App('redis://127.0.0.1:1/0', queue='q')\n"
            "app.build('t', 1)\n"
            "assert t.enqueue_span('q') is t.OFF\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')\n"
            "             and m not in before))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class FileExporter(SpanExporter):
    """Writes each span as a JSON line: what a forked child exports reaches the parent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans):  # type: ignore[no-untyped-def]
        with self.path.open("a") as f:
            for s in spans:
                f.write(json.dumps({"name": s.name, "trace_id": s.context.trace_id,
                                    "parent": s.parent.span_id if s.parent else None,
                                    "pid": os.getpid()}) + "\n")  # fmt: skip
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS


def test_a_forked_worker_traces_runs_enqueued_before_the_fork(real, queue, tmp_path) -> None:
    out = tmp_path / "spans.jsonl"
    provider = install(FileExporter(out))
    try:
        app = real.app(queue)

        @app.task(name="t")
        def t(payload):
            pass

        with trace.get_tracer("shop").start_as_current_span("POST /x") as request:
            app.enqueue("t", 1, run_id="f-1")
        pid = os.fork()
        if pid == 0:  # the child: a worker process forked from a configured parent
            code = 1
            try:
                fresh = zsched.App(real.url, queue=queue)  # no connection of the parent's
                fresh.tasks.update(app.tasks)
                asyncio.run(run_all(fresh, real))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        provider.shutdown()
        _unset_provider()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    child = [s for s in lines if s["pid"] == pid]
    assert {s["name"] for s in child} == {f"dispatch {queue}", f"run {queue}"}
    assert {s["trace_id"] for s in child} == {request.get_span_context().trace_id}
