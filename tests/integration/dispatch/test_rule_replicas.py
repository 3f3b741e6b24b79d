"""Invariant 4 for rules: replicas race on every slot; each fires exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import redis
from procs import wait_for

import zsched
from zsched.dispatch.simulate import ledger_rows
from zsched.rules.triggers import slot_run_id

T0 = 1_800_000_000_000
ROOT = Path(__file__).resolve().parents[3]


def test_three_dispatcher_processes_fire_each_of_1000_slots_once(redis_url, queue) -> None:
    r = redis.Redis.from_url(redis_url)
    clock_key = f"test:{queue}:clock"
    r.set(clock_key, T0 - 1)

    class KeyClock:
        def now_ms(self) -> int:
            return int(r.get(clock_key))

    app = zsched.App(redis_url, queue=queue, clock=KeyClock())
    app.schedule("tick", "t", every=1, misfire="catch_up")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    procs = [subprocess.Popen([sys.executable, "-m", "integration.apps.rule_racer", redis_url, queue],
                              cwd=ROOT / "tests", env=env) for _ in range(3)]  # fmt: skip
    try:
        for i in range(1000):
            slot = T0 + i * 1000
            r.set(clock_key, slot)
            wait_for(lambda s=slot: (r.zscore(app.keys.rule_next, "tick") or 0) > s, 30,
                     f"slot {i} to fire", poll=0.001)  # fmt: skip
    finally:
        r.set(f"test:{queue}:stop", 1)
        for p in procs:
            p.wait(30)
    assert [p.returncode for p in procs] == [0, 0, 0]
    rows = ledger_rows(app, "tick")
    slots = Counter(x.slot_ms for x in rows)
    assert len(slots) == 1000 and set(slots.values()) == {1}
    assert {x.outcome for x in rows} == {"ran"}
    made = {m.decode() for m in r.hkeys(app.keys.runs)}
    assert made == {slot_run_id("tick", T0 + i * 1000) for i in range(1000)}
    assert int(r.hget(app.keys.stats, "fired")) == 1000
