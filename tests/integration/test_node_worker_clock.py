"""One clock everywhere, in the Node worker too (issue 18, defect 6; DESIGN.md invariant 3): a
Node worker whose machine's clock is an hour fast stamps a retry's next attempt (the
envelope's run_at_ms, the next attempt's scheduled_for and start lag) with the Redis server's
time, as the Python worker does (tests/integration/worker/test_worker_clock.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.test_cross_language import dispatch
from tests.state import envelope_of
from zsched.protocol.envelope import decode

HOUR_MS = 3_600_000
#: Far below the hour of skew; a loaded host's round trips stay well inside it.
NEAR_MS = 60_000
#: Loaded before worker.js: this process's clock runs an hour fast.
FAST_CLOCK = f"data:text/javascript,const n = Date.now; Date.now = () => n() + {HOUR_MS};"


def _server_ms(real: Any) -> int:
    sec, usec = real.sync.time()
    return int(sec) * 1000 + int(usec) // 1000


async def test_a_node_worker_whose_clock_is_an_hour_fast_stamps_a_retry_with_server_time(
    real: Any, queue: str, node_dir: Path
) -> None:
    app = real.app(queue)
    app.enqueue("fail", {"n": 1}, run_id="r1")
    await dispatch(app, real)
    r = subprocess.run(
        ["node", "--import", FAST_CLOCK, "worker.js", "--redis", real.url, "--queue", queue,
         "--once", "--max-attempts", "3", "--retry-delay-ms", "10000"],
        cwd=node_dir, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (out,) = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert (out["outcome"], out["written"]) == ("retry", True)
    server = _server_ms(real)
    env = decode(envelope_of(real.sync, app.keys, "r1"), "r1")
    assert env.attempt == 2
    # Due 10 s after the server's now (retry.lua adds the delay to TIME), and the envelope
    # says so too: not 10 s after the worker's clock, an hour ahead.
    assert abs(env.run_at_ms - (server + 10_000)) < NEAR_MS
