"""The chaos suite's smoke run inside `make test`: every fault kind, a short workload.

`make chaos` runs the full version (20,000 runs over 60 s); see docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from chaos_checks import judge
from chaos_harness import run
from chaos_main import SMOKE

SEED = int(os.environ.get("ZSCHED_CHAOS_SEED", "20261129"))


@pytest.mark.timeout(120)
def test_under_kills_zombies_redis_restarts_and_flushes_nothing_is_lost_or_done_twice(
    tmp_path, capsys
) -> None:
    obs = run(dataclasses.replace(SMOKE, seed=SEED), tmp_path / "chaos")
    failures, table = judge(obs)
    with capsys.disabled():
        print("\n" + table)
    assert failures == [], "\n".join(failures) + "\nfaults:\n" + "\n".join(obs.fault_log)
    # The plan really injected every kind of fault.
    for kind in (
        "kill_worker",
        "kill_dispatcher",
        "stop",
        "redis_kill",
        "redis_stop",
        "script_flush",
        "client_kill",
    ):
        assert obs.faults[kind] >= 1, kind
    assert obs.faults["redis_kill"] == 2
