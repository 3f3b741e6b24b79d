"""Every bad argument is an InvalidArgument naming its field; `except ValueError` still catches
it (and RuleError), and a missing run or rule is a NotFound that `except LookupError` catches."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pytest

import zsched
from zsched import InvalidArgument, NotFound, RuleError, RunNotFound, ScheduleNotFound, ZschedError

ENQUEUE_CASES = [
    ("t", {"delay": -1}, "delay"),
    ("t", {"delay": "5"}, "delay"),
    ("t", {"run_at": math.nan}, "run_at"),
    ("t", {"run_at": datetime(2030, 1, 1)}, "run_at"),  # naive
    ("t", {"run_at": 1e15}, "run_at"),  # after 9999
    ("t", {"run_id": ""}, "run_id"),
    ("t", {"run_id": "é" * 257}, "run_id"),  # 514 bytes
    ("t", {"run_id": "bytes-\udcff"}, "run_id"),
    ("", {}, "task_name"),
    ("t", {"on_conflict": "nope"}, "on_conflict"),
    ("t", {"on_conflict": "debounce"}, "max_delay"),
    ("t", {"run_at": 1.0, "delay": 1.0}, None),  # the combination is wrong, not one field
]


@pytest.mark.parametrize(("task", "kwargs", "field"), ENQUEUE_CASES)
def test_a_bad_enqueue_argument_is_an_invalid_argument_naming_it(backend, queue, task, kwargs,
                                                                  field) -> None:  # fmt: skip
    app = backend.app(queue)
    with pytest.raises(InvalidArgument) as got:
        app.enqueue(task, **kwargs)
    assert got.value.field == field
    if field is not None:
        assert field.replace("_", " ") in str(got.value) or field in str(got.value)
    with pytest.raises(ValueError):  # what callers caught before
        app.enqueue(task, **kwargs)


TASK_CASES: list[tuple[dict[str, Any], str]] = [
    ({"name": "x" * 300}, "name"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"timeout": 0}, "timeout"),
    ({"backoff": -1}, "backoff"),
    ({"max_result_bytes": -1}, "max_result_bytes"),
    ({"max_concurrency": 0}, "max_concurrency"),
    ({"rate": "fast"}, "rate"),
    ({"rate": 0}, "rate"),
    ({"burst": 2}, "burst"),
    ({"limit_key": str}, "limit_key"),
    ({"rate": "1/s", "limit_key": "not callable"}, "limit_key"),
]


@pytest.mark.parametrize(("options", "field"), TASK_CASES)
def test_a_bad_task_option_is_an_invalid_argument_naming_it(backend, queue, options,
                                                             field) -> None:  # fmt: skip
    app = backend.app(queue)
    with pytest.raises(InvalidArgument) as got:
        app.task(**options)(lambda payload: None)
    assert got.value.field == field and field in str(got.value)
    assert isinstance(got.value, ValueError) and isinstance(got.value, ZschedError)


def test_a_task_name_registered_twice_is_an_invalid_argument(backend, queue) -> None:
    app = backend.app(queue)
    app.task(name="same")(lambda payload: None)
    with pytest.raises(InvalidArgument, match="already registered") as got:
        app.task(name="same")(lambda payload: None)
    assert got.value.field == "name"


def test_other_bad_arguments_name_their_field(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(InvalidArgument, match="pause note") as got:
        app.pause_queue("x" * 501)
    assert got.value.field == "note"
    with pytest.raises(InvalidArgument, match="durable") as got:
        zsched.App(backend.sync, queue=queue, durable="bogus")
    assert got.value.field == "durable"
    with pytest.raises(InvalidArgument, match="Retry delay") as got:
        zsched.Retry(delay=-1)
    assert got.value.field == "delay"
    with pytest.raises(InvalidArgument, match="queue name") as got:
        zsched.App(backend.sync, queue="a{b}")
    assert got.value.field == "queue"


def test_a_bad_rule_is_a_rule_error_an_invalid_argument_and_a_value_error(backend, queue):
    app = backend.app(queue)
    for bad in ({"every": -1}, {"cron": "61 * * * *", "tz": "UTC"}, {"cron": "* * * * *"}):
        with pytest.raises(RuleError) as got:
            app.schedule("r", "t", **bad)
        assert isinstance(got.value, InvalidArgument) and isinstance(got.value, ValueError)
    assert app.schedules() == []  # nothing written


def test_a_missing_run_or_rule_is_a_not_found_and_a_lookup_error(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(LookupError) as run:
        app.get_run("nobody")
    assert isinstance(run.value, RunNotFound) and isinstance(run.value, NotFound)
    with pytest.raises(LookupError) as rule:
        app.pause_schedule("none")
    assert isinstance(rule.value, ScheduleNotFound) and isinstance(rule.value, ZschedError)


def test_unknown_task_names_the_dead_letter_reason_a_worker_writes() -> None:
    exc = zsched.UnknownTask.named("report.send")
    assert exc.task == "report.send" and isinstance(exc, ZschedError)
    assert str(exc) == "unknown task 'report.send': not registered with this worker"
