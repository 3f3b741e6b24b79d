"""The bridge: a zsched consumer that sends each Celery fire with `send_task`.

It is an ordinary zsched worker running one registered task, `BRIDGE_TASK`, so it inherits
acks, retries with backoff while the broker is away, dead letters and the reclaim of a dead
bridge's runs. The Celery task id is the run id (`nightly-backup@2026-12-02T01:00:00Z`).

A redelivered fire (a bridge died after sending, before its ack) is not sent again when the
`celery_sent` marker says it was; the one window left is a crash between the send and the
marker, where Celery sees the same task id twice (visible in Flower and the result backend).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from zsched.errors import Fail
from zsched.integrations.celery.rules import BRIDGE_TASK, CeleryFire, decode_fire, fire_payload
from zsched.worker.tasks import RunInfo, current_run

if TYPE_CHECKING:
    from zsched.app import App, EnqueuedId

log = logging.getLogger(__name__)
#: Attempts of one send before the fire becomes a dead letter: with the worker's exponential
#: backoff (capped by max_backoff, 1 h by default; the jitter takes up to a quarter) this
#: rides out a broker outage of over half a day.
SEND_ATTEMPTS = 30
#: Celery message headers the bridge adds (read by the worker hook in hook.py).
HEADER_QUEUE = "zsched_queue"
HEADER_PARTITION = "zsched_partition"
HEADER_WAIT = "zsched_wait"
#: One blocking read of the done list; short, so a client's socket timeout never cuts it.
_WAIT_STEP_S = 2.0


def expires_for(fire: CeleryFire, info: RunInfo) -> datetime | float | None:
    """The `expires` sent: the rule's own, else the slot plus the rule's grace. A catch-up
    replay is fired after its slot's grace by design, so it counts from when it was fired."""
    if "expires" in fire.options:
        exp: float | None = fire.options["expires"]
        return exp
    if fire.grace_ms is None:
        return None
    start = info.scheduled_for
    if info.dispatched_at is not None and info.dispatched_at > start:
        start = info.dispatched_at
    return start + timedelta(milliseconds=fire.grace_ms)


def _headers(app: App, fire: CeleryFire, run_id: str) -> dict[str, Any]:
    headers = dict(fire.options.get("headers") or {})
    headers[HEADER_QUEUE] = app.queue
    part = app.keys_for_run(run_id).partition
    if part is not None:
        headers[HEADER_PARTITION] = part
    if fire.wait_s:
        headers[HEADER_WAIT] = 1
    return headers


def send_fire(app: App, celery_app: Any, fire: CeleryFire, info: RunInfo) -> None:
    """Send one fire (unless a previous delivery did), then wait for it when it must."""
    keys = app.keys_for_run(info.run_id)
    sent_key = keys.celery_sent(info.run_id)
    again = info.deliveries > 1 or info.attempt > 1
    if again and app.redis.exists(sent_key):
        log.info("run %s was sent to Celery already; not sending it again", info.run_id,
                 extra={"queue": app.queue, "run_id": info.run_id})  # fmt: skip
    else:
        opts = {k: v for k, v in fire.options.items() if k not in ("headers", "expires")}
        celery_app.send_task(
            fire.task, args=fire.args, kwargs=fire.kwargs, task_id=info.run_id,
            expires=expires_for(fire, info), headers=_headers(app, fire, info.run_id), **opts,
        )  # fmt: skip
        app.redis.set(sent_key, b"1", px=app.settings.dedupe_window_ms)
    if fire.wait_s:
        wait_done(app, info.run_id, fire.wait_s)


def wait_done(app: App, run_id: str, wait_s: float) -> str | None:
    """Wait (at most `wait_s`) for the worker hook to report run `run_id`'s task finished;
    returns its final state, or None when the wait ran out."""
    key = app.keys_for_run(run_id).celery_done(run_id)
    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("Celery task %s did not report back within %.0f s; freeing its rule's "
                        "lease", run_id, wait_s, extra={"queue": app.queue})  # fmt: skip
            return None
        # BLMOVE onto itself reads without taking: a bridge that dies after reading leaves the
        # report for the redelivery (the hook's TTL removes it).
        got = app.redis.blmove(key, key, max(0.1, min(_WAIT_STEP_S, left)), "RIGHT", "RIGHT")
        if got is not None:
            state: bytes = got
            return state.decode("utf-8", "replace")


def make_handler(app: App, celery_app: Any) -> Any:
    """The bridge task's handler (sync: send_task and the wait block, so a thread runs them)."""

    def send(payload: Any) -> None:
        try:
            fire = decode_fire(payload)
        except ValueError as exc:
            raise Fail(str(exc)) from exc  # malformed: a dead letter, not a retry
        send_fire(app, celery_app, fire, current_run())

    send.__qualname__ = send.__name__ = "celery_bridge_send"
    return send


def register_bridge(app: App, celery_app: Any, *, attempts: int = SEND_ATTEMPTS) -> None:
    """Register the bridge task on `app`: a worker of `app` then sends its Celery fires
    through `celery_app` (its broker settings; the tasks need not be importable here)."""
    app.task(name=BRIDGE_TASK, max_attempts=attempts, backoff=1.0)(make_handler(app, celery_app))


def enqueue_celery(
    app: App,
    celery_task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    options: Mapping[str, Any] | None = None,
    run_at: datetime | float | None = None,
    delay: timedelta | float | None = None,
    run_id: str | None = None,
) -> EnqueuedId:
    """A one-off Celery task sent by the bridge at `run_at` (or after `delay`): zsched's
    durable delayed set instead of Celery's eta/countdown (which the broker holds in memory)."""
    payload = fire_payload(celery_task, args, kwargs, options, where="enqueue_celery")
    return app.enqueue(BRIDGE_TASK, payload, run_at=run_at, delay=delay, run_id=run_id)
