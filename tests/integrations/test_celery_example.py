"""examples/celery runs as documented: its Celery worker as before, and two copies of
`zsched celery-bridge proj.celery:app --beat-schedule --dispatch` instead of `celery beat`."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections import Counter

import redis
from celery_harness import ROOT, stop, wait_for

EXAMPLE = ROOT / "examples" / "celery"


def proc(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", *args], cwd=EXAMPLE, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def test_the_celery_example_refills_tokens_once_per_second_with_two_bridges(redis_server, queue):
    base = redis_server.url.rsplit("/", 1)[0]
    env = {**os.environ, "CELERY_BROKER_URL": f"{base}/3", "ZSCHED_REDIS_URL": f"{base}/0",
           "TOKENS_REDIS_URL": f"{base}/4", "PYTHONPATH": f"{ROOT}:{EXAMPLE}"}  # fmt: skip
    bucket = redis.Redis.from_url(f"{base}/4")
    bucket.delete("refills", "tokens")
    procs = [proc(env, "celery", "-A", "proj", "worker", "--pool=threads", "-c", "2",
                  "--without-mingle", "--without-gossip", "-l", "warning")]  # fmt: skip
    procs += [proc(env, "zsched", "celery-bridge", "proj.celery:app", "--beat-schedule",
                   "--dispatch", "--queue", queue, "--metrics-port", "0") for _ in range(2)]  # fmt: skip
    try:
        wait_for(lambda: bucket.llen("refills") >= 3, "three refills", 90)
        line = procs[1].stdout.readline().decode()  # "zsched: serving /metrics on port N"
        port = int(line.rsplit(" ", 1)[1])
        scrape = lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",  # noqa: E731
                                                timeout=10).read()  # fmt: skip
        # Each bridge gets its share of the fires: this one's sends show in its metrics.
        sent = lambda: [x for x in scrape().splitlines()  # noqa: E731
                        if x.startswith(b"zsched_runs_completed_total{")
                        and b'task="zsched.celery.send"' in x]  # fmt: skip
        wait_for(sent, "the bridge's sends in its metrics", 60)
    finally:
        outs = [stop(p) for p in procs]
    ids = [x.decode() for x in bucket.lrange("refills", 0, -1)]
    assert all(i.startswith("token-refill@") for i in ids), ids
    assert set(Counter(ids).values()) == {1}, (ids, outs)
    assert int(bucket.get("tokens") or 0) == 10 * len(ids)
    bucket.close()
