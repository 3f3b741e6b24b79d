"""Another client of the same Redis: PING every millisecond, record (time, round trip) pairs.

`python -m bench.pinger URL OUT` runs until SIGTERM, then writes [[t, rtt_ms], ...] to OUT.
It is a separate process so the driver's own work (and its GIL) cannot inflate the figures.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import redis


def main() -> None:
    url, out = sys.argv[1], sys.argv[2]
    r = redis.Redis.from_url(url, protocol=2)
    r.ping()
    samples: list[tuple[float, float]] = []
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while running and len(samples) < 2_000_000:
        t = time.perf_counter()
        try:
            r.ping()
        except redis.RedisError:
            break
        samples.append((time.time(), (time.perf_counter() - t) * 1000))
        time.sleep(0.001)
    with open(out, "w") as f:
        json.dump(samples, f)


if __name__ == "__main__":
    main()
