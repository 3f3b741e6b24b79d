"""zsched/eventloop.py and ZSCHED_EVENT_LOOP: which loop a zsched process runs on."""

from __future__ import annotations

import asyncio
import sys

import pytest

from zsched import eventloop
from zsched.config import event_loop_from_env
from zsched.errors import ConfigError


async def _running() -> str:
    return eventloop.name(asyncio.get_running_loop())


def test_auto_runs_on_uvloop_where_it_is_installed() -> None:
    pytest.importorskip("uvloop", reason="uvloop is a dependency on CPython outside Windows")
    assert eventloop.run(_running()) == "uvloop"
    assert eventloop.run(_running(), "uvloop") == "uvloop"


def test_asyncio_runs_on_asyncios_own_loop() -> None:
    assert eventloop.loop_factory("asyncio") is None
    assert eventloop.run(_running(), "asyncio") == "asyncio"


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert eventloop.loop_factory("auto") is None
    assert eventloop.run(_running()) == "asyncio"


def test_uvloop_asked_for_and_missing_is_refused_naming_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    main = _running()
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        eventloop.run(main, "uvloop")
    assert main.cr_frame is None  # closed: no "never awaited" warning later


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ConfigError, match="one of auto, uvloop, asyncio, got 'trio'"):
        eventloop.loop_factory("trio")


@pytest.mark.parametrize(("value", "choice"), [(None, "auto"), ("", "auto"), ("asyncio", "asyncio"),
                                               (" UVLOOP ", "uvloop"), ("auto", "auto")])  # fmt: skip
def test_the_variable_is_read_at_start_up(value, choice) -> None:
    env = {} if value is None else {"ZSCHED_EVENT_LOOP": value}
    assert event_loop_from_env(env) == choice


def test_a_bad_variable_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="ZSCHED_EVENT_LOOP must be auto, uvloop or asyncio"):
        event_loop_from_env({"ZSCHED_EVENT_LOOP": "trio"})
