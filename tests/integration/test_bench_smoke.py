"""Smoke run of `make bench`: every scenario completes at tiny sizes and yields numbers.

Speed is not asserted here (targets live in the benchmark, BENCHMARKS.md); only that each
scenario runs end to end against its own redis-server, stops by itself and measures something.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.__main__ import SCENARIOS, main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "smoke.json"
    main(["--smoke", "--out", str(out)])
    return json.loads(Path(out).read_text())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_bench_scenario_completes_and_measures_its_targets(smoke: dict, name: str) -> None:
    median = smoke["scenarios"][name]["median"]
    for metric, _target, _how in SCENARIOS[name][2]:
        assert metric in median, f"{name} did not report {metric}"
        assert math.isfinite(median[metric]), f"{name}.{metric} is {median[metric]}"


def test_bench_throughput_scenarios_handle_every_run(smoke: dict) -> None:
    for name in ("e2e_1_worker", "e2e_2_workers"):
        run = smoke["scenarios"][name]["runs"][0]
        assert run["handled"] == run["n"] == run["acked"]
        assert run["runs_per_s"] > 0


def test_bench_records_the_machine(smoke: dict) -> None:
    assert smoke["machine"]["cores"] >= 1
    assert smoke["machine"]["redis"] not in ("", "?")


def test_bench_layouts_measures_every_layout(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import layouts

    assert layouts.main(["--n", "2000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 8
    for row in rows:
        assert int(row.rsplit("|", 2)[1]) > 0, row
