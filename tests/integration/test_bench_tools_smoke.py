"""Smoke runs of the benchmark tools that `make bench` does not run (BENCHMARKS.md names each):
every one completes at tiny sizes and prints its figures, so none breaks silently between the
sessions that use it. Speed is not asserted: only that a figure of each kind comes out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench.aio_enqueue as aio_enqueue

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def run(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=200)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_burst_tool_reports_the_script_calls_over_1_and_5_ms() -> None:
    out = run("bench.burst", "--n", "2000", "--timeout", "60", "--bursts", "2")
    # The slow log's summary is always printed; the slowest calls per command only when some
    # call took over 1 ms (at this size often none does). One per burst: the second on the
    # same, long-running dispatcher.
    assert len(re.findall(r"EVALSHA: \d+ calls, [\d.]+ us per call", out)) == 2
    assert len(re.findall(r"calls over 1 ms: \d+, over 5 ms: \d+", out)) == 2
    assert re.search(r"burst 2 \(the same dispatcher, long running\): 2000 runs, 2000 acked", out)


def test_the_lag_probe_splits_each_lag_into_its_parts() -> None:
    out = run("bench.lagprobe", "--rate", "100", "--seconds", "0.5")
    assert re.search(r"[\d.]+ =\s+[\d.]+ \+\s+[\d.]+", out)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind)")
def test_the_instruction_counter_measures_every_step_and_the_floor() -> None:
    out = run("bench.instructions", "--one", "10", "--drain", "200", "--batch", "50",
              "--limit", "100")  # fmt: skip
    for step in ("ack 50 a call", "floor dispatch 50", "floor XACK 50"):
        assert re.search(re.escape(step) + r"\s+[\d,]+ instructions/run", out), step


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind)")
def test_the_one_call_stages_tool_measures_every_cut_of_enqueue() -> None:
    out = run("bench.onecall_stages", "--n", "5", "--rounds", "1")
    for label in ("EVALSHA of `return 1`", "up to: validation of the run", "the whole script",
                  "the 7 commands alone"):  # fmt: skip
        assert re.search(re.escape(label) + r"\s+[\d,]+ instructions/run", out), label
    assert len(re.findall(r"^up to: ", out, re.M)) == 5


def test_the_scaling_tool_measures_one_and_two_masters() -> None:
    out = run("bench.scaling", "--smoke")
    assert re.search(r"^\| 1 \| [\d,]+ \|", out, re.M) and re.search(
        r"^\| 2 \| [\d,]+ \|", out, re.M
    )


def test_the_async_enqueue_benchmark_measures_every_variant(monkeypatch, capsys) -> None:
    monkeypatch.setattr(aio_enqueue, "N_ONE", 60)
    monkeypatch.setattr(aio_enqueue, "N_MANY", 500)
    results = aio_enqueue.main(1)
    assert set(results) == set(aio_enqueue.VARIANTS)
    assert all(len(r) == 1 and r[0] > 0 for r in results.values())


def test_the_wake_benchmark_measures_every_rule_operation() -> None:
    out = run("bench.wake", "--rounds", "1")
    for op in ("create", "edit", "resume", "backfill", "sync"):
        assert re.search(rf"^\| {op} \| 1 \| [\d.]+ / [\d.]+ \|", out, re.M), op
    for op in ("pause", "remove"):  # the contract, not a speed: nothing fired after the call
        assert re.search(rf"^\| {op} \| 1 \| atomic .* \| 0 \|$", out, re.M), op


def test_the_worker_cpu_tool_measures_the_worker_alone() -> None:
    out = run("bench.worker_cpu", "--n", "300", "--rounds", "1", "--settings", "{}",
              "--settings", '{"concurrency": 8}')  # fmt: skip
    summary = r"median worker CPU [\d.]+ us/run .*XREADGROUP [\d.]+, EVALSHA"
    assert len(re.findall(summary, out)) == 2  # one per settings


def test_the_ready_memory_tool_shows_a_dispatched_run_smaller_than_its_envelope_twice() -> None:
    """bench.ready_memory: a run on the stream keeps its envelope once (in the entry), so the
    `runs` hash holds its id and entry id only, well under the envelope it held before."""
    out = run("bench.ready_memory", "2000")
    m = re.search(r"2,000 runs: delayed_b_per_run (\d+), ready_b_per_run (\d+), "
                  r"runs_hash_b_per_run (\d+), stream_b_per_run (\d+)", out)  # fmt: skip
    assert m, out
    delayed, ready, runs_hash, stream = map(int, m.groups())
    assert runs_hash < stream and ready > delayed > 0


def test_the_enqueue_cpu_tool_meters_both_in_every_round() -> None:
    """bench.enqueue_cpu: zsched's batched enqueue and the floor's in one server, the order
    swapped each round; every round reports both and their ratio, then the median."""
    out = run("bench.enqueue_cpu", "--rounds", "2", "--n", "1500", "--json")
    assert len(re.findall(r"round \d/2: zsched [\d.]+ us, floor [\d.]+ us, ratio [\d.]+", out)) == 2
    assert re.search(r"median of 2 rounds of 1,500 runs: zsched [\d.]+ us a run", out)
    rounds = json.loads(out.strip().splitlines()[-1])
    assert [sorted(r) for r in rounds] == [sorted(rounds[0])] * 2
    assert all(r["zsched_redis_us_per_run"] > 0 and r["floor_redis_us_per_run"] > 0 for r in rounds)
    bad = subprocess.run([sys.executable, "-m", "bench.enqueue_cpu", "--rounds", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "--rounds and --n must be at least 1" in bad.stderr
