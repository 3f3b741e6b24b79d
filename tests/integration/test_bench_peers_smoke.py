"""Smoke run of `make bench-peers` at equal settings (zsched and the bare floor only: the
other peers need bench/peers/.venv), and of the benchmark's CPU cap. Speed is not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cgroup import CpuCap, available
from bench.contender import SHOWN_WORKER
from bench.peers.__main__ import main
from bench.peers.table import main as table
from zsched.config import WorkerSettings

pytestmark = pytest.mark.timeout(180)


def test_equal_settings_record_redis_cost_per_run(tmp_path: Path, capsys) -> None:
    out = tmp_path / "peers.json"
    r = main(["--quick", "--repeat", "1", "--only", "zsched", "bare", "--concurrency", "50",
              "--tuned", "--workloads", "e2e", "enqueue", "--n-e2e", "300",
              "--out", str(out)])  # fmt: skip
    assert r["errors"] == []
    assert set(r["configs"]) == {"zsched@50", "bare@50", "zsched", "bare", "zsched-cli",
                                 "zsched-async"}  # fmt: skip
    assert "'concurrency': 50" in r["configs"]["zsched@50"]
    # Equal settings: zsched reads as many per call as the floor (COUNT C).
    assert "'read_batch': 50" in r["configs"]["zsched@50"]
    # Every setting that bounds what a zsched worker reads and holds is stated (F1).
    for c in ("zsched@50", "zsched", "zsched-cli", "zsched-async"):
        for k in SHOWN_WORKER:
            assert f"'{k}': " in r["configs"][c], (c, k)
        assert "'batch_size': " in r["configs"][c]
    # The CLI defaults are stated, not an empty dict; the async client says how it is driven.
    assert f"'concurrency': {WorkerSettings().concurrency}" in r["configs"]["zsched-cli"]
    assert "AsyncApp enqueue" in r["configs"]["zsched-async"]
    assert "COUNT 50" in r["configs"]["bare@50"]
    assert "in flight at most 50" in r["configs"]["bare@50"]
    for c in r["configs"]:
        e2e, enq = r["medians"]["e2e"][c], r["medians"]["enqueue"][c]
        assert e2e["runs_per_s"] > 0
        assert e2e["drain_redis_us_per_run"] > 0 and e2e["drain_commands_per_run"] > 0
        for phase in ("one", "many"):
            assert enq[f"{phase}_redis_us_per_run"] > 0
            assert enq[f"{phase}_commands_per_run"] > 0
    # The bare floor's one-call enqueue is exactly its HSET + ZADD.
    assert r["medians"]["enqueue"]["bare@50"]["one_commands_per_run"] == pytest.approx(2.0)
    capsys.readouterr()
    table([str(out)])
    md = capsys.readouterr().out
    assert "| drain: Redis CPU µs per run |" in md and "### 50" in md and "### tuned" in md
    # The CLI defaults' goal (>= 0.5x the floor) is printed as a ratio inside each run.
    assert "| zsched ÷ | bare@50 | bare |" in md


ROOT = Path(__file__).resolve().parents[2]
#: The peers' env (`make bench-peers` builds it); a worktree without one can point at another.
PEERS_PY = next((p for p in (Path(os.environ.get("ZSCHED_PEERS_PYTHON", "/nonexistent")),
                             ROOT / "bench/peers/.venv/bin/python") if p.exists()), None)  # fmt: skip

#: Each peer's knob that bounds what its worker takes from Redis, as its config line states it.
PREFETCH = {"bullmq": "no prefetch", "celery": "worker_prefetch_multiplier 4",
            "saq": "no prefetch", "arq": "queue_read_limit", "rq": "no prefetch"}  # fmt: skip


@pytest.mark.skipif(PEERS_PY is None, reason="needs bench/peers/.venv (make bench-peers)")
def test_every_peer_states_its_concurrency_and_prefetch() -> None:
    """Issue 25 F1: each peer's recorded config line names its concurrency (at equal settings)
    and what its worker reads ahead; run in the peers' env, where their libraries import."""
    code = (
        "import json\nfrom bench.peers.__main__ import maker\n"
        f"print(json.dumps({{n: maker(n, 50)().config for n in {sorted(PREFETCH)!r}}}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(PEERS_PY), "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    configs = json.loads(out)
    for name, knob in PREFETCH.items():
        assert knob in configs[name], (name, configs[name])
        # RQ has no concurrency setting; its line says so.
        assert ("50" if name != "rq" else "no concurrency setting") in configs[name], name


@pytest.mark.skipif(not available(), reason="needs root and a cgroup cpu controller")
def test_cpu_cap_puts_a_process_in_a_capped_group_and_removes_it() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        cap = CpuCap(f"zsched-test-{os.getpid()}", p.pid, 5)
        if cap.v1:
            assert (cap.path / "cpu.cfs_quota_us").read_text().strip() == "1000"
            assert (cap.path / "cpu.cfs_period_us").read_text().strip() == "20000"
            assert str(p.pid) in (cap.path / "tasks").read_text().split()
        else:
            assert (cap.path / "cpu.max").read_text().split() == ["1000", "20000"]
        cap.remove()
        assert not cap.path.exists()
    finally:
        p.kill()
        p.wait()
