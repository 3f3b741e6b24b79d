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


def test_bench_btree_prototype_measures_both_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import btree

    assert btree.main(["--n", "1000", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 3 * 2  # three shapes of queue, two layouts
    for row in rows:
        assert float(row.split("|")[4]) > 0, row


def _bound_and_leaf(member: bytes) -> tuple[tuple[int, str], bytes]:
    end = member.index(b"\0\0", 15)
    rid = member[15:end].replace(b"\0\1", b"\0").decode()
    return (int(member[:15]), rid), member[end + 2 :]


def _leaves_in_order(r) -> list[tuple[int, str]]:
    """The prototype's runs, leaf after leaf in index order; each leaf checked on the way."""
    seq: list[tuple[int, str]] = []
    for m in r.zrange("{q}:index", 0, -1):
        bound, n = _bound_and_leaf(m)
        leaf = b"{q}:leaf:" + n
        items = [(int(s), k.decode()) for k, s in r.zrange(leaf, 0, -1, withscores=True)]
        assert items and r.object("encoding", leaf) == b"listpack"
        assert bound <= items[0]
        seq += items
    assert len(r.keys("{q}:leaf:*")) == r.zcard("{q}:index")
    return seq


def _some_id(rnd, seed: int) -> str:
    from zsched.protocol.runids import fresh_run_id

    if seed % 2 == 0:
        return fresh_run_id()
    return "".join(rnd.choice("\0\1ab|~é語") for _ in range(rnd.randrange(1, 12)))


def _random_batch(rnd, seed: int, runs: list, seen: set) -> list[object]:
    """Up to 300 new runs (due at a few instants, in order, or at random by `seed`), noted in
    `runs`; the prototype enqueue's ARGV."""
    batch: list[object] = []
    for _ in range(rnd.randrange(1, 300)):
        due = [rnd.randrange(50), 10**6 - len(runs), rnd.randrange(10**6)][seed % 3]
        rid = _some_id(rnd, seed)
        if rid not in seen:
            seen.add(rid)
            runs.append((due, rid))
            batch += [rid, due]
    return batch


def test_bench_btree_prototype_keeps_runs_in_order_in_listpack_leaves() -> None:
    """The prototype's figures mean something only if it is a correct index: after every
    batch the leaves, read in index order, hold exactly the runs in (due, id) order, each leaf
    a listpack under its bound; dispatch removes exactly the runs due, from the front. Ids
    are fresh ones, or of any length with NUL and non-ASCII characters."""
    import random

    from bench import btree
    from bench.common import client, server

    keys, dkeys = ["{q}:index", "{q}:leaves", "{q}:leaf:"], ["{q}:index", "{q}:leaf:"]
    with server() as srv:
        r = client(srv.url)
        enq, disp = r.register_script(btree.BTREE_ENQUEUE), r.register_script(btree.BTREE_DISPATCH)
        for seed in range(12):
            r.flushall()
            rnd, runs, seen = random.Random(seed), [], set()
            for _ in range(rnd.randrange(5, 25)):
                batch = _random_batch(rnd, seed, runs, seen)
                if batch:
                    enq(keys=keys, args=batch)
                assert _leaves_in_order(r) == sorted(runs)
            removed = 0
            for now in [*sorted(rnd.sample(range(10**6), 4)), 10**7]:
                while got := disp(keys=dkeys, args=[now, rnd.randrange(1, 300)]):
                    removed += got
                assert removed == sum(1 for due, _ in runs if due <= now)
                assert _leaves_in_order(r) == sorted(x for x in runs if x[0] > now)
