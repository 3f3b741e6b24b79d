"""Bad input and wrong settings at the front doors (App, scripts, settings): each is refused
with an error that names the problem, and nothing of it is written. What the worker does with
bad runs it reads is in tests/integration/test_core_flow.py (unknown task, undecodable
envelope) and tests/unit/protocol/test_envelope.py; WRONGTYPE per script in tests/scripts."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
import redis

import zsched
from tests.state import delayed_count
from zsched import ConfigError, PayloadError, QueueSettings, RuleError, WorkerSettings
from zsched.config import from_env
from zsched.store import scripts as S

YEAR_MS = 365 * 24 * 3600 * 1000


def nothing_written(backend, app: zsched.App) -> bool:
    return int(backend.sync.exists(*app.keys.all_fixed())) == 0


def test_an_oversized_payload_is_refused_naming_its_size_and_nothing_is_written(backend, queue):
    app = backend.app(queue, settings=QueueSettings(max_payload_bytes=1000))
    with pytest.raises(PayloadError, match=r"payload is \d+ bytes, over the limit of 1000"):
        app.enqueue("t", "x" * 2000)
    # One bad item refuses the whole batch before any round trip.
    with pytest.raises(PayloadError, match="over the limit"):
        app.enqueue_many([{"task": "t", "payload": i} for i in range(10)] + [("t", "x" * 2000)])
    assert nothing_written(backend, app)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"cron": "61 * * * *", "tz": "UTC"}, "minute"),
        ({"cron": "not a cron", "tz": "UTC"}, "cron"),
        ({"cron": "*/5 * * * *", "tz": "Mars/Olympus_Mons"}, "Mars/Olympus_Mons"),
        ({"cron": "*/5 * * * *"}, "zone"),
        ({"every": 0}, "interval"),
        ({"every": -5}, "interval"),
        ({"every": math.nan}, "interval"),
        ({"cron": "* * * * *", "tz": "UTC", "misfire": "sometimes"}, "sometimes"),
    ],
)
def test_an_invalid_rule_is_a_rule_error_and_writes_nothing(backend, queue, options, needle):
    app = backend.app(queue)
    with pytest.raises(RuleError, match=needle):
        app.schedule("s", "t", **options)
    assert app.schedules() == [] and nothing_written(backend, app)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delay": -1},
        {"delay": math.nan},
        {"delay": math.inf},
        {"delay": "5"},
        {"delay": True},
        {"delay": timedelta(seconds=-1)},
        {"run_at": math.nan},
        {"run_at": -1.0},
        {"run_at": 1e15},  # after the year 9999
        {"run_at": datetime(2030, 1, 1)},  # naive
        {"run_at": "tomorrow"},
        {"run_at": 1.0, "delay": 1.0},
    ],
)
def test_a_bad_delay_or_time_is_a_value_error_and_writes_nothing(backend, queue, kwargs):
    app = backend.app(queue)
    with pytest.raises(ValueError):
        app.enqueue("t", **kwargs)
    assert nothing_written(backend, app)


async def test_a_run_years_away_waits_and_one_long_past_is_due_at_once(backend, queue) -> None:
    app = backend.app(queue)
    ran = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(zsched.current_run().run_id)

    far = datetime.now(UTC).replace(microsecond=0) + timedelta(days=50 * 365)
    app.enqueue("t", run_at=far, run_id="far")
    app.enqueue("t", run_at=datetime(1970, 1, 2, tzinfo=UTC), run_id="past")
    d = app.dispatcher(redis=backend.async_client(), max_idle_ms=5000)
    w = app.worker(redis=backend.async_client())
    t1 = await d.tick()
    assert t1.moved == 1 and t1.next_due_ms == int(round(far.timestamp() * 1000))
    assert d._sleep_s(t1) <= 5.0  # it sleeps at most max_idle, not 50 years
    assert await w.tick() == 1 and ran == ["past"]
    assert app.get_run("far").state == "scheduled"
    await d.close()
    await w.close()


async def test_run_ids_are_utf8_text_of_at_most_512_bytes(backend, queue) -> None:
    app = backend.app(queue)
    ran = []

    @app.task(name="t")
    async def t(payload: object) -> None:
        ran.append(zsched.current_run().run_id)

    with pytest.raises(ValueError, match="not valid UTF-8"):
        app.enqueue("t", run_id="bytes-\udcff")
    with pytest.raises(ValueError, match="over the limit of 512"):
        app.enqueue("t", run_id="é" * 257)  # 514 bytes
    ok = ["é" * 256, "日本語-🙂", "with space\tand\x00nul"]
    for rid in ok:
        app.enqueue("t", run_id=rid)
    d, w = app.dispatcher(redis=backend.async_client()), app.worker(redis=backend.async_client())
    await d.tick()
    await w.tick()
    assert sorted(ran) == sorted(ok)  # every id came back exactly as it went in
    assert all(app.get_run(rid).state == "done" for rid in ok)
    await d.close()
    await w.close()


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"ok\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"a" * 513])
def test_a_foreign_client_cannot_enqueue_a_run_id_that_is_not_utf8(backend, queue, raw) -> None:
    app = backend.app(queue)
    call = S.enqueue(app.keys, [(raw, 0, "t", b"\x80")], now_ms=None, dedupe_window_ms=1000,  # type: ignore[list-item]
                     max_envelope_bytes=1000)  # fmt: skip
    with pytest.raises(redis.exceptions.ResponseError, match="run_id is (not valid UTF-8|longer)"):
        app.scripts.run(call)
    assert nothing_written(backend, app)


def test_a_huge_batch_goes_in_one_call_and_again_as_duplicates(real, queue) -> None:
    app = real.app(queue)
    items = [{"task": "t", "payload": i, "run_id": f"r{i}", "delay": 3600} for i in range(20_000)]
    ids = app.enqueue_many(items)
    assert len(ids) == 20_000 and not any(i.duplicate for i in ids)
    assert delayed_count(real.sync, app.keys) == 20_000
    again = app.enqueue_many(items)
    assert all(i.duplicate for i in again)
    assert real.sync.hmget(app.keys.stats, "enqueued", "duplicate") == [b"20000", b"20000"]


def test_an_unknown_setting_name_is_a_config_error_naming_it(backend, queue) -> None:
    app = backend.app(queue)
    with pytest.raises(ConfigError, match="concurency.*known: .*concurrency"):
        app.worker(concurency=4)
    with pytest.raises(ConfigError, match="batchsize"):
        app.dispatcher(batchsize=10)
    with pytest.raises(ConfigError, match="bogus"):
        from_env(WorkerSettings, "ZSCHED_WORKER_", {"ZSCHED_WORKER_BOGUS": "1"})
    with pytest.raises(TypeError, match="bogus"):
        QueueSettings(bogus=1)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", ["many", math.nan, -1, True])
def test_a_bad_setting_value_is_a_config_error_naming_the_setting(backend, queue, value) -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        backend.app(queue).worker(concurrency=value)
