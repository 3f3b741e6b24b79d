"""A zsched 0.3 worker finishes the runs a 0.2 dispatcher put on the stream, whether a 0.3
dispatch has renamed 0.2's `entries` hash yet or not (docs/operations.md, "Upgrading from
zsched 0.2": the workers may be upgraded first)."""

from __future__ import annotations

from typing import Any

import pytest
from worker_ticks import tick_until_finished

from zsched.protocol.keys import GROUP
from zsched.runs import entry_shape
from zsched.store import scripts as S
from zsched.store.delayed import tag


@pytest.mark.parametrize("renamed", [False, True])
async def test_a_03_worker_finishes_runs_a_02_dispatcher_put_on_the_stream(
    backend, queue, renamed
) -> None:
    app = backend.app(queue)
    done: list[Any] = []
    app.task(name="t")(lambda payload: done.append(payload))
    r, k = backend.sync, app.keys
    for i in range(3):
        app.enqueue("t", i, run_id=f"r{i}")
    r.xgroup_create(k.ready, GROUP, id="0", mkstream=True)
    entry_shape.write(r, k, "plain")  # the entries as 0.2 wrote them
    app.scripts.run(S.dispatch(k, now_ms=None, limit=10, max_backlog=0))
    # As zsched 0.2 left them: each value tagged (its due, its envelope), the entry ids in
    # the `entries` hash (a 0.3 dispatch then renames it to `legacy_entries`).
    r.delete(k.entries)
    old = k.legacy_entries if renamed else k.entries
    for entry, f in r.xrange(k.ready):
        rid = f[b"run_id"].decode()
        r.hset(k.runs, rid, tag(int(f[b"due_ms"]), f[b"envelope"]))
        r.hset(old, rid, entry)
    assert app.get_run("r0").state == "ready" and app.get_run("r0").task == "t"
    w = app.worker(redis=backend.async_client())
    await tick_until_finished(w, r, k.runs)
    assert sorted(done) == [0, 1, 2]
    assert {app.get_run(f"r{i}").state for i in range(3)} == {"done"}
    assert r.hlen(k.runs) == 0 and r.exists(old) == 0 and r.xlen(k.ready) == 0
