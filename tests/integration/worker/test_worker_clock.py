"""One clock everywhere (issue 18, defect 6; DESIGN.md invariant 3): a worker and an enqueuing
process whose own clocks are an hour fast still report the Redis server's times:
`current_run().scheduled_for`, the start lag, and a retry's due time."""

from __future__ import annotations

import time
from typing import Any

import zsched
from tests.state import envelope_of
from zsched.protocol.envelope import decode

HOUR_S = 3600.0
#: Far below the hour of skew; a loaded host's round trips stay well inside it.
NEAR_S = 60.0


def _server_s(real: Any) -> float:
    sec, usec = real.sync.time()
    return int(sec) + int(usec) / 1e6


async def test_a_worker_whose_clock_is_an_hour_fast_reports_server_times(real, queue,
                                                                        monkeypatch) -> None:  # fmt: skip
    app = real.app(queue)
    seen: list[zsched.RunInfo] = []

    @app.task(name="t")
    def t(payload: Any) -> None:
        seen.append(zsched.current_run())
        if len(seen) == 1:
            raise zsched.Retry(delay=10)

    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + HOUR_S)
    app.enqueue("t", None, delay=0, run_id="r1")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    await d.tick()
    await w.tick()
    server = _server_s(real)
    (info,) = seen
    assert abs(info.scheduled_for.timestamp() - server) < NEAR_S
    lag = app.metrics.start_lag.labels(queue, "t")
    assert lag._sum.get() < NEAR_S  # not 3,600 s
    # The retry's envelope says it is due 10 s after the server's now, not the worker's.
    env = decode(envelope_of(real.sync, app.keys, "r1"), "r1")
    assert abs(env.run_at_ms / 1000 - (server + 10)) < NEAR_S
    await d.close()
    await w.close()
