"""The chaos judge itself: it must catch what it claims to catch (no Redis needed)."""

from __future__ import annotations

import re
from collections import Counter

from chaos_checks import judge
from chaos_harness import Observed, one_place
from chaos_plan import Config, make_plan


def observed(log: list[str], stats: dict[str, int], done: list[str] | None = None) -> Observed:
    runs = ["a", "b"]
    obs = Observed(Config(runs=2, rules=False), [], run_ids=runs, drained=True)
    obs.exit_codes = {"worker-0": 0}
    places = {
        "delayed": [],
        "runs": [],
        "ready": [],
        "done": done if done is not None else runs,
        "dead": [],
        "entries": [],
        "waiting": [],
    }
    effects = {line.split("|")[0]: "x" for line in log}
    obs.final = {
        "places": places,
        "stats": stats,
        "pending": 0,
        "effects": effects,
        "log": log,
        "violations": [],
    }
    return obs


def line(run_id: str, deliveries: int) -> str:
    return f"{run_id}|1|{deliveries}|1|1000|900|"


OK_STATS = {"enqueued": 2, "dispatched": 2, "acked": 2, "reclaimed": 0}


def test_a_clean_run_passes() -> None:
    failures, table = judge(observed([line("a", 1), line("b", 1)], OK_STATS))
    assert failures == []
    assert "lost" in table


def test_an_extra_execution_backed_by_a_reclaim_passes_and_is_counted() -> None:
    obs = observed([line("a", 1), line("a", 2), line("b", 1)], {**OK_STATS, "reclaimed": 1})
    failures, table = judge(obs)
    assert failures == []
    # The column is as wide as the longest label: match the row, not its padding.
    assert re.search(r"duplicates: extra executions \(X\) +1\n", table)


def test_a_second_execution_under_the_same_delivery_fails() -> None:
    obs = observed([line("a", 1), line("a", 1), line("b", 1)], OK_STATS)
    assert any("under one delivery" in f for f in judge(obs)[0])


def test_a_reclaim_count_that_does_not_match_the_deliveries_fails() -> None:
    obs = observed([line("a", 1), line("b", 3)], {**OK_STATS, "reclaimed": 1})
    assert any("reclaimed counter 1" in f for f in judge(obs)[0])


def test_a_run_never_executed_or_not_done_fails() -> None:
    failures = judge(
        observed([line("a", 1)], {**OK_STATS, "acked": 1, "dispatched": 1}, done=["a"])
    )[0]
    assert any("never executed" in f for f in failures)
    assert any("lost" in f for f in failures)


def test_a_run_in_two_places_is_a_violation() -> None:
    places = {
        "delayed": ["a"],
        "runs": ["a"],
        "ready": [],
        "done": ["a"],
        "dead": [],
        "entries": [],
        "waiting": [],
    }
    assert any("a is in delayed and done" in v for v in one_place(places))


def test_the_fault_plan_is_a_function_of_the_seed() -> None:
    cfg = Config(seed=5, seconds=30)
    assert make_plan(cfg) == make_plan(Config(seed=5, seconds=30))
    assert make_plan(cfg) != make_plan(Config(seed=6, seconds=30))
    kinds = Counter(f.kind for f in make_plan(cfg))
    assert kinds["redis_kill"] == 2 and kinds["stop"] == kinds["cont"] == 2
