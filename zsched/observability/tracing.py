"""OpenTelemetry tracing, optional (`pip install zsched[otel]`): from enqueue to the handler.

Active only when the application has configured a tracer provider
(`opentelemetry.trace.set_tracer_provider`). zsched never imports OpenTelemetry itself: it looks
for `opentelemetry.trace` in `sys.modules`, which an application that set a provider has
imported. Without it (or without the extra), every hook below is one dictionary lookup, and
nothing is added to the envelope.

Spans, following OpenTelemetry's messaging conventions (`messaging.system` = `zsched`, the
queue is the destination, the run id the message id):

* `enqueue <queue>` (PRODUCER, operation type `send`), a child of the caller's span (an HTTP
  request, say). Its W3C trace context (`traceparent`, `tracestate`) travels in the envelope's
  `trace` field (docs/protocol.md), so retries keep it.
* `dispatch <queue>` (INTERNAL), a child of the enqueue span, from the attempt's due time to
  the moment the dispatcher put it on the stream (the stream entry id: Redis's clock),
  recorded by the worker that reads the run (dispatchers never decode envelopes).
* `run <queue>` (CONSUMER, operation type `process`), one per attempt, a child of the enqueue
  span and linked to it (the conventions' creation-context link), with the run id, task,
  attempt, deliveries and schedule id. The handler runs with it as the current span, async or
  sync (the worker copies the context into its thread). A retry and a dead letter are events
  on it (`zsched.retry`, `zsched.dead_letter`); a failed attempt sets the span's status.

Forked workers: nothing here holds per-process state; the SDK's span processors handle the
fork themselves.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from zsched.protocol.envelope import Envelope

_TRACER = "zsched"
_UNKNOWN = object()
_W3C = ("traceparent", "tracestate")


def _api() -> ModuleType | None:
    """opentelemetry.trace when a tracer provider is configured, else None (no import)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    # The API keeps the provider set by set_tracer_provider here (None until then): reading it
    # costs ~50 ns where get_tracer_provider() costs ~1 us (it reads the environment).
    if getattr(api, "_TRACER_PROVIDER", _UNKNOWN) is None:
        return None
    if isinstance(api.get_tracer_provider(), api.ProxyTracerProvider):
        return None  # the API's default: nobody configured a provider
    return api


def active() -> bool:
    """Whether zsched records spans now."""
    return _api() is not None


class _Off:
    """The enqueue span when tracing is off: a reusable no-op."""

    __slots__ = ()
    carrier: dict[str, str] | None = None

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def enqueued(self, run_ids: list[str], duplicates: int) -> None:
        return None


OFF = _Off()


class _EnqueueSpan:
    """A producer span around one enqueue call; `carrier` is its trace context for envelopes."""

    def __init__(self, api: ModuleType, queue: str, count: int) -> None:
        self._api = api
        attrs: dict[str, Any] = {
            "messaging.system": "zsched",
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "messaging.destination.name": queue,
        }
        if count != 1:
            attrs["messaging.batch.message_count"] = count
        tracer = api.get_tracer(_TRACER)
        self._cm = tracer.start_as_current_span(
            f"enqueue {queue}", kind=api.SpanKind.PRODUCER, attributes=attrs
        )
        self._span: Any = None
        self.carrier: dict[str, str] | None = None

    def __enter__(self) -> _EnqueueSpan:
        from opentelemetry.propagate import inject

        self._span = self._cm.__enter__()
        carrier: dict[str, str] = {}
        inject(carrier)
        self.carrier = {k: carrier[k] for k in _W3C if k in carrier} or None
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    def enqueued(self, run_ids: list[str], duplicates: int) -> None:
        if len(run_ids) == 1:
            self._span.set_attribute("messaging.message.id", run_ids[0])
        if duplicates:
            self._span.set_attribute("zsched.duplicates", duplicates)


def enqueue_span(queue: str, count: int = 1) -> _EnqueueSpan | _Off:
    """`with enqueue_span(q) as s:` build envelopes with `s.carrier`, then `s.enqueued(...)`."""
    api = _api()
    return OFF if api is None else _EnqueueSpan(api, queue, count)


def start_attempt(env: Envelope, queue: str, deliveries: int, entry_id: str,
                  due_ms: int) -> tuple[Any, Any] | None:  # fmt: skip
    """Start the `run` span of one attempt (after recording its `dispatch` span) and make it
    the current span of this context. Returns a handle for `end_attempt`, or None."""
    api = _api()
    if api is None:
        return None
    from opentelemetry import context
    from opentelemetry.propagate import extract

    parent = extract(env.trace) if env.trace else None
    creation = api.get_current_span(parent).get_span_context() if parent is not None else None
    links = [api.Link(creation)] if creation is not None and creation.is_valid else []
    tracer = api.get_tracer(_TRACER)
    base = {"messaging.system": "zsched", "messaging.destination.name": queue,
            "messaging.message.id": env.run_id}  # fmt: skip
    dispatched_ms = entry_id.split("-", 1)[0]
    if links and dispatched_ms.isdigit():
        end_ns = int(dispatched_ms) * 1_000_000
        start_ns = min(due_ms * 1_000_000, end_ns)
        tracer.start_span(
            f"dispatch {queue}", context=parent, start_time=start_ns,
            attributes={**base, "zsched.attempt": env.attempt},
        ).end(end_time=end_ns)  # fmt: skip
    attrs: dict[str, Any] = {
        **base,
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "zsched.run_id": env.run_id,
        "zsched.task": env.task,
        "zsched.attempt": env.attempt,
        "zsched.deliveries": deliveries,
    }
    if env.schedule_id:
        attrs["zsched.schedule_id"] = env.schedule_id
    span = tracer.start_span(f"run {queue}", context=parent, kind=api.SpanKind.CONSUMER,
                             links=links, attributes=attrs)  # fmt: skip
    return span, context.attach(api.set_span_in_context(span))


def end_attempt(handle: tuple[Any, Any] | None) -> None:
    """End the span `start_attempt` started (in the same context)."""
    if handle is None:
        return
    from opentelemetry import context

    span, token = handle
    context.detach(token)
    span.end()


def event(name: str, failed: bool = False, **attributes: Any) -> None:
    """An event on the current run span (`zsched.retry`, `zsched.dead_letter`)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return
    span = api.get_current_span()
    if not span.is_recording():
        return
    span.add_event(name, {k: v for k, v in attributes.items() if v is not None})
    if failed:
        span.set_status(api.Status(api.StatusCode.ERROR, str(attributes.get("reason", ""))[:200]))
