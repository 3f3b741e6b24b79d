"""`zsched worker` and `zsched dispatcher` on uvloop (the default where it is installed) and
on asyncio's own loop (--event-loop asyncio): the same runs done, once each, and a clean exit
on SIGTERM (zsched/eventloop.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import redis
from procs import stop, wait_for, zsched_proc

import zsched


@pytest.mark.parametrize(("flag", "loop"), [(None, "uvloop"), ("uvloop", "uvloop"),
                                           ("asyncio", "asyncio")])  # fmt: skip
def test_the_processes_run_on_the_chosen_loop(redis_url, queue, flag, loop) -> None:
    r = redis.Redis.from_url(redis_url)
    app = zsched.App(redis_url, queue=queue)
    # Sync handlers (the thread pool hands results back across threads) and async ones that
    # wait (a task per run), some of each retried by nothing: every one runs exactly once.
    app.enqueue_many([{"task": "quick", "run_id": f"q{i}"} for i in range(50)]
                     + [{"task": "awaits", "payload": {"seconds": 0.01}, "run_id": f"a{i}"}
                        for i in range(50)])  # fmt: skip
    chosen = ("--event-loop", flag) if flag else ()
    disp = zsched_proc("-v", "dispatcher", "--queue", queue, *chosen, url=redis_url)
    w = zsched_proc("-v", "worker", "integration.apps.crashapp:app", "--queue", queue, *chosen,
                    url=redis_url)  # fmt: skip
    try:
        wait_for(lambda: int(r.hget(app.keys.stats, "acked") or 0) == 100, 60, "all 100 done")
    finally:
        out_w = stop(w)
        out_d = stop(disp)
    assert w.returncode == 0 and disp.returncode == 0, (out_w, out_d)
    for out in (out_w, out_d):
        assert f"running on the {loop} event loop" in out
    executed = Counter(x.decode().split("|")[0] for x in r.lrange(f"test:{queue}:executed", 0, -1))
    assert len(executed) == 100 and set(executed.values()) == {1}


def test_a_bad_loop_choice_is_refused_before_anything_starts(redis_url, queue) -> None:
    p = zsched_proc("worker", "integration.apps.crashapp:app", "--queue", queue,
                    url=redis_url, env={"ZSCHED_EVENT_LOOP": "trio"})  # fmt: skip
    out = p.communicate(timeout=60)[0].decode()
    assert p.returncode == 2
    assert "ZSCHED_EVENT_LOOP must be auto, uvloop or asyncio, got 'trio'" in out
