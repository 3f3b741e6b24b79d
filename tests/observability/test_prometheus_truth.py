"""The dashboard's numbers equal the truth with two dispatchers and two workers scraped.

Real processes (`zsched dispatcher`, `zsched worker`) serve /metrics; Debian's Prometheus
scrapes all four. The runs are enqueued by this test's own process, which nobody scrapes,
as a web app would. Every dashboard query and alert rule is evaluated by that Prometheus.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from integration.procs import stop, zsched_proc
from observability_helpers import (
    INSTALL_PROMTOOL,
    ROOT,
    alert_rules,
    dashboard_exprs,
    free_port,
    grafana_vars_to_promql,
    load_dashboards,
    prometheus,
    wait_for,
)

import zsched
from zsched.observability.metrics import Metrics

APP = "observability.signals_app:app"


def query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # Prometheus explains a bad query in the body
        raise AssertionError(f"{expr}: {exc.code} {exc.read().decode()}") from None
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def scalar(base: str, expr: str) -> float | None:
    result = query(base, expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def ready(base: str) -> bool:
    with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
        return bool(response.status == 200)


@pytest.fixture
def stack(redis_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    binary = prometheus()
    if binary is None:
        pytest.fail(f"prometheus is not installed (the Makefile installs it): {INSTALL_PROMTOOL}")
    queue = f"truth-{uuid.uuid4().hex[:8]}"
    ports = {role: [free_port(), free_port()] for role in ("dispatcher", "worker")}
    procs = []
    for port in ports["dispatcher"]:
        procs.append(zsched_proc("dispatcher", "--queue", queue, "--metrics-port", str(port),
                                 url=redis_url))  # fmt: skip
    for port in ports["worker"]:
        procs.append(zsched_proc("worker", APP, "--queue", queue, "--metrics-port", str(port),
                                 url=redis_url))  # fmt: skip
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "prometheus" / "alerts.yml")],
        "scrape_configs": [
            {"job_name": f"zsched-{role}",
             "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports[role]]}]}
            for role in ("dispatcher", "worker")
        ],
    }))  # fmt: skip
    log = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for(lambda: ready(base), 30, f"prometheus (see {tmp_path / 'prometheus.log'})")
        wait_for(lambda: scalar(base, "count(up == 1)") == 4, 60, "four targets up")
        yield {"base": base, "queue": queue, "url": redis_url}
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=15)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
        log.close()
        for p in procs:
            stop(p, signal.SIGTERM)


def panel_exprs(queue: str) -> dict[str, str]:
    (dashboard,) = load_dashboards().values()
    out = {}
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            out.setdefault(panel["title"], grafana_vars_to_promql(t["expr"], queue=queue))
    return out


def test_the_dashboard_totals_equal_the_truth_with_two_of_each_process(stack) -> None:
    base, queue = stack["base"], stack["queue"]
    app = zsched.App(stack["url"], queue=queue, metrics=Metrics())
    for i in range(30):
        app.enqueue("ok", i, run_id=f"ok-{i}")
    dups = sum(app.enqueue("ok", 0, run_id="ok-0").duplicate for _ in range(2))
    for i in range(5):
        app.enqueue("flaky", i, run_id=f"flaky-{i}")
    for i in range(3):
        app.enqueue("bad", i, run_id=f"bad-{i}")
    app.schedule("minutely", "ok", cron="* * * * *", tz="UTC", paused=True)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    past = (now - timedelta(minutes=5), now - timedelta(minutes=1))
    backfilled = app.backfill("minutely", *past)
    assert (dups, backfilled) == (2, 5)
    assert app.backfill("minutely", *past) == 0  # 5 backfill duplicates
    truth = {
        "Enqueued": 30 + 5 + 3 + 5,
        "Dispatched": 30 + 5 + 3 + 5 + 5,  # the 5 retries are dispatched again
        "Acked": 30 + 5 + 5,
        "Retried": 5,
        "Dead-lettered": 3,
        "Duplicates caught": 2 + 5,
    }

    def stats() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in app.redis.hgetall(app.keys.stats).items()}

    wait_for(lambda: stats().get("acked") == truth["Acked"] and stats().get("dead") == 3, 60,
             "the runs to finish")  # fmt: skip
    exprs = panel_exprs(queue)

    def dashboard() -> dict[str, float | None]:
        return {title: scalar(base, exprs[title]) for title in truth}

    deadline = time.monotonic() + 30
    while (seen := dashboard()) != truth and time.monotonic() < deadline:
        time.sleep(0.5)
    assert seen == truth
    # Four processes serve each Redis counter: a plain sum would count it four times (once
    # each has been scraped since the runs finished; the max is right from the first).
    acked = f'zsched_queue_runs_acked_total{{queue="{queue}"}}'
    wait_for(lambda: scalar(base, f"count({acked} == 40)") == 4, 30, "every process scraped")
    assert scalar(base, f"sum({acked})") == 4 * 40
    assert scalar(base, exprs["Acked"]) == 40
    # Process counters are summed: each dispatcher counts only the runs it moved.
    assert scalar(base, f'sum(zsched_runs_dispatched_total{{queue="{queue}"}})') == 48
    # The enqueuing process serves no metrics: its own counter is nowhere to be scraped.
    assert query(base, f'zsched_runs_enqueued_total{{queue="{queue}"}}') == []
    dead = query(
        base, f'max by (reason) (zsched_queue_runs_dead_lettered_total{{queue="{queue}"}}) > 0'
    )
    assert {r["metric"]["reason"]: float(r["value"][1]) for r in dead} == {"failed": 3}
    outcomes = query(base, "max by (schedule, outcome) (zsched_queue_rule_outcomes_total"
                           f'{{queue="{queue}"}}) > 0')  # fmt: skip
    assert {(r["metric"]["schedule"], r["metric"]["outcome"]): float(r["value"][1])
            for r in outcomes} == {("minutely", "backfilled"): 5}  # fmt: skip
    kinds = query(base, "max by (kind, schedule) (zsched_queue_duplicates_total"
                        f'{{queue="{queue}"}}) > 0')  # fmt: skip
    by_kind = {(r["metric"]["kind"], r["metric"].get("schedule", "")): float(r["value"][1])
               for r in kinds}  # fmt: skip
    assert by_kind.pop(("backfill", "minutely")) == 5
    assert sum(by_kind.values()) == 2 and set(by_kind) <= {("live", ""), ("done", "")}


def test_every_dashboard_query_and_alert_evaluates_on_the_live_stack(stack) -> None:
    base, queue = stack["base"], stack["queue"]
    wait_for(lambda: scalar(base, f'count(zsched_queue_runs_enqueued_total{{queue="{queue}"}})')
             == 4, 30, "the queue counters from every process")  # fmt: skip
    for dashboard in load_dashboards().values():
        for _where, expr in dashboard_exprs(dashboard):
            if not expr.startswith("label_values("):
                query(base, grafana_vars_to_promql(expr, queue=queue, interval="10s"))
    for rule in alert_rules():
        query(base, rule["expr"])
    hb = panel_exprs(queue)["Heartbeat age by process"]
    wait_for(lambda: len(query(base, hb)) == 4, 30, "a heartbeat from every process")
    assert all(float(a["value"][1]) < 60 for a in query(base, hb))
