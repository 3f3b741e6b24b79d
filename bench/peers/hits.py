"""The peers' no-op handler body: append "<epoch s> <lag ms>" to $BENCH_HITS.

One unbuffered O_APPEND write per run, so it works from forked children (RQ's work horse,
Celery's pool) that never run atexit handlers; small appends are atomic.
"""

from __future__ import annotations

import os
import time
from typing import Any

_fd: int | None = None
_pid = 0


def hit(payload: Any) -> None:
    global _fd, _pid
    if _fd is None or _pid != os.getpid():
        _fd = os.open(os.environ["BENCH_HITS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _pid = os.getpid()
    t = time.time()
    at = payload.get("at", t * 1000) if isinstance(payload, dict) else t * 1000
    os.write(_fd, f"{t:.6f} {t * 1000 - at:.3f}\n".encode())
