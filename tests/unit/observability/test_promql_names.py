"""Every PromQL expression of grafana/ and prometheus/ names only metrics that zsched exposes."""

from __future__ import annotations

import re

import pytest
import yaml
from observability_helpers import (
    ROOT,
    alert_rules,
    dashboard_exprs,
    load_dashboards,
    promql_metric_names,
)

from zsched.observability.collector import COLLECTED_COUNTERS, COLLECTED_METRICS
from zsched.observability.metrics import Metrics

REQUIRED_ALERTS = {
    "ZschedDispatchLagHigh",  # late work
    "ZschedDueBacklogStale",  # late work, nothing dispatched at all
    "ZschedMissedSlots",
    "ZschedDuplicateRuns",
    "ZschedPendingStuck",
    "ZschedDeadLettersGrowing",
    "ZschedNoDispatcher",
    "ZschedNoWorker",
    "ZschedWorkersNotConsuming",
}
REQUIRED_PANELS = [
    "dispatch lag", "start lag", "throughput by outcome", "due backlog", "pending",
    "missed slots", "retries and dead letters", "run duration by task", "rules",
]  # fmt: skip


def exposed_names() -> set[str]:
    """Sample names a scrape can show: histograms as _bucket/_sum/_count, counters as _total."""
    names = set(COLLECTED_METRICS) | set(COLLECTED_COUNTERS)
    for family in Metrics().registry.collect():
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        elif family.type == "counter":
            names.add(f"{family.name}_total")
        else:
            names.add(family.name)
    return names


def all_exprs() -> list[tuple[str, str]]:
    found = []
    for path, dashboard in load_dashboards().items():
        found += [
            (f"{path.relative_to(ROOT)} {where}", e) for where, e in dashboard_exprs(dashboard)
        ]
    found += [(f"prometheus/alerts.yml {r['alert']}", r["expr"]) for r in alert_rules()]
    return found


# -- the lexer that the name check relies on ------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'histogram_quantile(0.99, sum by (le) (rate(zsched_a_bucket{queue=~"$queue"}'
            "[$__rate_interval])))",
            {"zsched_a_bucket"},
        ),
        ('time() - max by (queue) (zsched_hb{role="worker"}) > 60', {"zsched_hb"}),
        ("a > 0 unless on (queue) sum by (queue) (rate(b_total[10m])) > 0", {"a", "b_total"}),
        ('absent(x{role="d"}) or (y offset 5m)', {"x", "y"}),
        ("label_values(zsched_stream_length, queue)", {"zsched_stream_length"}),
        ("sum without (instance) (c) / ignoring (le) group_left (task) d * 1e3", {"c", "d"}),
        ('count(m{a="by (x)", b=~"sum(.*)"} < 30) or vector(0)', {"m"}),
        ("rate(e[5m:1m]) and bool f", {"e", "f"}),
    ],
)
def test_the_promql_lexer_finds_exactly_the_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


def test_exposed_names_follow_the_histogram_and_counter_suffixes() -> None:
    names = exposed_names()
    assert "zsched_dispatch_lag_seconds_bucket" in names
    assert "zsched_dispatch_lag_seconds" not in names
    assert "zsched_runs_completed_total" in names
    assert "zsched_runs_completed" not in names
    assert "zsched_process_heartbeat_timestamp_seconds" in names


# -- the files ------------------------------------------------------------------------------------


def test_there_are_expressions_to_check() -> None:
    exprs = all_exprs()
    assert sum("grafana/" in where for where, _ in exprs) >= 20
    assert sum("alerts.yml" in where for where, _ in exprs) >= len(REQUIRED_ALERTS)


@pytest.mark.parametrize(("where", "expr"), all_exprs(), ids=lambda v: str(v)[:60])
def test_every_promql_expression_uses_only_defined_metric_names(where: str, expr: str) -> None:
    names = promql_metric_names(expr)
    assert names, f"{where}: no metric in {expr!r}"
    unknown = names - exposed_names()
    assert not unknown, f"{where}: unknown metric(s) {sorted(unknown)} in {expr!r}"


def test_queue_gauges_are_never_summed_across_processes() -> None:
    """Every process serves the same queue gauges: sum() would count them once per replica."""
    gauges = "|".join(re.escape(n) for n in COLLECTED_METRICS)
    summed = re.compile(rf"\b(sum|count)\s*(\b(by|without)\s*\([^)]*\)\s*)?\(\s*({gauges})\b")
    offenders = [(w, e) for w, e in all_exprs() if summed.search(e)]
    assert not offenders


_REDIS_COUNTER = re.compile(rf"\b({'|'.join(re.escape(n) for n in COLLECTED_COUNTERS)})\b")
_TAKEN_WITH_MAX = re.compile(
    r"\bmax\s+by\s*\(([^)]*)\)\s*\(\s*(?:(?:rate|increase|irate)\s*\(\s*)?$"
)


def test_redis_counters_are_taken_with_max_per_partition_before_any_sum() -> None:
    """Every process serves the same Redis counters: each use is max by (queue, partition, ...)
    of the series (or of its rate), so two scraped replicas can never count twice."""
    uses = 0
    for where, expr in all_exprs():
        for m in _REDIS_COUNTER.finditer(expr):
            uses += 1
            taken = _TAKEN_WITH_MAX.search(expr[: m.start()])
            assert taken, f"{where}: {m[1]} not taken with max by (...): {expr!r}"
            grouping = {g.strip() for g in taken[1].split(",")}
            assert {"queue", "partition"} <= grouping, f"{where}: max by {grouping} in {expr!r}"
    assert uses >= 10


@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(zsched_queue_runs_acked_total[5m]))",
        "max by (queue) (zsched_queue_runs_acked_total)",
        "sum(max by (queue, partition) (zsched_queue_runs_acked_total)) + zsched_queue_fenced_total",
    ],
)
def test_the_max_check_catches_a_sum_across_processes(expr: str) -> None:
    bad = []
    for m in _REDIS_COUNTER.finditer(expr):
        taken = _TAKEN_WITH_MAX.search(expr[: m.start()])
        if not taken or not {"queue", "partition"} <= {g.strip() for g in taken[1].split(",")}:
            bad.append(m[1])
    assert bad


def test_prometheus_config_holds_no_promql_but_loads_the_alerts() -> None:
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"zsched-dispatcher", "zsched-worker"} <= jobs
    for job in config["scrape_configs"]:  # a target label `role` would shadow the heartbeat's
        for relabel in job.get("relabel_configs", []):
            assert relabel.get("target_label") != "role"


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    rules = alert_rules()
    assert REQUIRED_ALERTS <= {r["alert"] for r in rules}
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert len(rule["annotations"]["description"].strip()) > 40, rule["alert"]


def test_every_alert_is_documented_in_operations() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    missing = [r["alert"] for r in alert_rules() if r["alert"] not in text]
    assert not missing


def test_every_metric_is_documented_in_operations() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    base = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exposed_names()}
    missing = sorted(n for n in base if n not in text)
    assert not missing


def test_the_dashboard_has_a_queue_variable_and_the_expected_panels() -> None:
    (dashboard,) = load_dashboards().values()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    query = variables["queue"]["query"]
    query = query["query"] if isinstance(query, dict) else query
    assert query == "label_values(zsched_stream_length, queue)"
    titles = [p["title"].lower() for p in dashboard["panels"] if p["type"] != "row"]
    for wanted in REQUIRED_PANELS:
        assert any(wanted in t for t in titles), wanted
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert 'queue=~"$queue"' in target["expr"], (panel["title"], target["expr"])
