"""Progress reporting inside a consumer process (zsched's, the bare minimum's, each Python peer's).

The handler calls `hit(payload)`; a daemon thread prints `P <count> <first> <last>` when the
count changed (every 20 ms at most) so the driver sees progress without any Redis command;
at exit the lags (ms from the run's intended time `at` to the handler call) go to a file.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from typing import Any

# print() writes the text and the newline separately: lines written from the reporting
# thread and the main thread ("ready") could interleave into "P 0 0 0ready". One lock, one
# write per line.
_OUT = threading.Lock()


def say(line: str) -> None:
    """Write one whole line to stdout, safely beside the reporting thread."""
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Reporter:
    def __init__(self, out: str | None) -> None:
        self.out = out
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.lags: list[float] = []
        self._printed = -1
        self._done = False
        threading.Thread(target=self._loop, daemon=True).start()
        atexit.register(self.dump)

    def hit(self, payload: Any) -> None:
        t = time.time()
        if not self.count:
            self.first = t
        self.count += 1
        self.last = t
        if isinstance(payload, dict) and "at" in payload:
            self.lags.append(t * 1000 - payload["at"])

    def ready(self) -> None:
        say("ready")

    def _loop(self) -> None:
        # Every 20 ms while runs come in; after a quiet second, every 0.5 s: this thread ran in
        # the measured consumer process, and its 50 wake-ups a second were most of the CPU an
        # idle zsched worker was charged with in the idle scenario.
        quiet_since = time.monotonic()
        while True:
            time.sleep(0.02 if time.monotonic() - quiet_since < 1.0 else 0.5)
            if self.count != self._printed:
                quiet_since = time.monotonic()
            self.report()

    def report(self) -> None:
        if self.count != self._printed:
            self._printed = self.count
            say(f"P {self.count} {self.first:.6f} {self.last:.6f}")

    def dump(self) -> None:
        if self._done:
            return
        self._done = True
        self.report()
        if self.out:
            tmp = f"{self.out}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.lags, f)
            os.replace(tmp, f"{self.out}.{os.getpid()}")


def exit_on_sigterm(stop: Any = None) -> None:
    """SIGTERM -> call `stop()` (graceful) or exit, so atexit dumps the lags."""

    def handler(signum: int, frame: Any) -> None:
        if stop is not None:
            stop()
        else:
            sys.exit(0)

    signal.signal(signal.SIGTERM, handler)
