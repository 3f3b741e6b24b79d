"""JSON logs: every line about a run carries the run, through the run's context variable."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

import zsched
from zsched.observability.logs import (
    JsonFormatter,
    RedactingFormatter,
    RunContextFilter,
    configure_logging,
)
from zsched.worker.tasks import RunInfo, set_current

SECRET = "Canary-pw-5d2c81"


@pytest.fixture
def lines() -> Iterator[Callable[[], list[dict[str, object]]]]:
    """The JSON lines of the `zsched` and `handlers` loggers so far."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.addFilter(RunContextFilter())
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger("zsched"), logging.getLogger("handlers")]
    old = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in buf.getvalue().splitlines()]
    for lg, level in old:
        lg.removeHandler(handler)
        lg.setLevel(level)


def info(**kw: object) -> RunInfo:
    values: dict[str, object] = {"run_id": "r1", "task": "t", "attempt": 2,
                                 "scheduled_for": datetime.now(UTC), "queue": "q",
                                 "schedule_id": "nightly"}  # fmt: skip
    values.update(kw)
    return RunInfo(**values)  # type: ignore[arg-type]


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("handlers", logging.INFO, __file__, 1, msg, args, None)
    r.__dict__.update(extra)
    return r


def test_a_line_made_while_a_run_is_current_carries_the_run() -> None:
    token = set_current(info())
    try:
        r = record("charged %s", "card")
        RunContextFilter().filter(r)
    finally:
        from zsched.worker.tasks import _current

        _current.reset(token)
    line = json.loads(JsonFormatter().format(r))
    assert line["message"] == "charged card"
    assert {k: line[k] for k in ("run_id", "task", "attempt", "queue", "schedule_id")} == {
        "run_id": "r1", "task": "t", "attempt": 2, "queue": "q", "schedule_id": "nightly"}  # fmt: skip
    assert (
        line["level"] == "INFO" and line["logger"] == "handlers" and line["time"].endswith("+00:00")
    )


def test_a_line_outside_a_run_has_no_run_fields_and_extra_wins() -> None:
    r = record("collector could not read queue", queue="other", customer=7)
    RunContextFilter().filter(r)
    line = json.loads(JsonFormatter().format(r))
    assert line["queue"] == "other" and line["customer"] == 7
    assert "run_id" not in line and "task" not in line


def test_secrets_are_redacted_in_json_and_text_lines() -> None:
    url = f"redis://default:{SECRET}@10.0.0.1:6379/0?sentinel_password={SECRET}"
    try:
        raise ConnectionError(f"cannot reach {url}")
    except ConnectionError:
        r = logging.LogRecord("zsched", logging.ERROR, __file__, 1, "lost %s", (url,),
                              sys.exc_info())  # fmt: skip
    r.__dict__["target"] = url
    for formatter in (JsonFormatter(), RedactingFormatter("%(message)s")):
        text = formatter.format(r)
        assert SECRET not in text and "5d2c81" not in text
        assert "10.0.0.1" in text


async def test_async_and_sync_handlers_and_the_worker_log_with_the_run(real, queue, lines) -> None:
    app = real.app(queue)
    log = logging.getLogger("handlers")

    @app.task(name="async_job")
    async def async_job(payload):
        log.info("async handler")

    @app.task(name="sync_job", max_attempts=1)
    def sync_job(payload):
        log.info("sync handler in a thread")
        raise zsched.Fail("bad input")

    app.enqueue("async_job", 1, run_id="a-1")
    app.enqueue("sync_job", 2, run_id="s-1")
    d, w = app.dispatcher(redis=real.async_client()), app.worker(redis=real.async_client())
    try:
        await d.tick()
        await w.tick()
    finally:
        await d.close()
        await w.close()
    got = lines()
    by_msg = {str(x["message"]): x for x in got}
    a, s = by_msg["async handler"], by_msg["sync handler in a thread"]
    assert (a["run_id"], a["task"], a["attempt"], a["queue"]) == ("a-1", "async_job", 1, queue)
    assert (s["run_id"], s["task"], s["attempt"], s["queue"]) == ("s-1", "sync_job", 1, queue)
    dead = next(x for x in got if "dead-lettered" in str(x["message"]))
    assert (dead["run_id"], dead["task"], dead["attempt"]) == ("s-1", "sync_job", 1)
    assert all("schedule_id" not in x for x in (a, s, dead))  # not a rule's run


def test_the_cli_writes_json_lines_without_the_password(tmp_path) -> None:
    from redis_server import free_port

    url = f"redis://default:{SECRET}@127.0.0.1:{free_port()}/0"  # nobody listens
    proc = subprocess.Popen(
        [sys.executable, "-m", "zsched", "--log-format", "json", "-v", "dispatcher", "--redis", url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    proc.terminate()
    proc.communicate(timeout=20)
    line = json.loads(first)
    assert "at start-up lost Redis" in line["message"] and line["level"] == "WARNING"
    assert SECRET not in first and "5d2c81" not in first


def test_an_unknown_log_format_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("ZSCHED_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="log format must be one of text, json, got 'yaml'"):
        configure_logging()
