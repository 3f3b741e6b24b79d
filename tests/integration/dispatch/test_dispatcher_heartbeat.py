"""Dispatcher heartbeats in Redis (zsched/dispatch/heartbeat.py): a running dispatcher beats while idle,
at most once per interval, trims old beats and removes its own when it stops."""

from __future__ import annotations

import asyncio
import time

from zsched import FakeClock
from zsched.dispatch import heartbeat as H
from zsched.observability.metrics import Metrics
from zsched.web.health import Thresholds

NOW = 1_800_000_000_000
HOUR_S = 3600.0
#: Far below the hour of skew; a loaded host's round trips stay well inside it.
NEAR_MS = 60_000


def _server_ms(real) -> int:
    sec, usec = real.sync.time()
    return int(sec) * 1000 + int(usec) // 1000


async def test_an_idle_dispatcher_beats_and_removes_its_beat_when_it_stops(real, queue) -> None:
    app = real.app(queue, metrics=Metrics())
    d = app.dispatcher(redis=real.async_client())  # nothing due: it sleeps max_idle (30 s)
    d.heartbeat.every_s = d.heartbeat.idle_every_s = 0.05
    stop = asyncio.Event()
    loop = asyncio.create_task(d.run(stop))
    seen: set[float] = set()
    deadline = time.monotonic() + 20
    while len(seen) < 3:  # beats keep coming while the loop sleeps between passes
        assert time.monotonic() < deadline, f"beats seen: {seen}"
        score = real.sync.zscore(app.keys.dispatchers, d.heartbeat.name)
        if score is not None:
            seen.add(score)
        await asyncio.sleep(0.01)
    assert [n for n, _ in H.dispatchers(real.sync, app.keys)] == [d.heartbeat.name]
    stop.set()
    await asyncio.wait_for(loop, 10)
    assert real.sync.zscore(app.keys.dispatchers, d.heartbeat.name) is None
    await d.close()


async def test_beats_are_rate_limited_and_old_ones_trimmed(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    r = backend.async_client()
    beat = H.Heartbeat(app.keys, "me")  # every 5 s
    backend.sync.zadd(app.keys.dispatchers, {"gone": NOW - H.KEEP_MS - 1, "recent": NOW - 10})
    written = [await beat.beat(r, NOW + i) for i in range(100)]
    assert written == [True] + [False] * 99  # one write, however often the loop asks
    assert H.dispatchers(backend.sync, app.keys) == [("me", NOW), ("recent", NOW - 10)]
    assert await beat.beat(r, NOW + 7, force=True)
    assert backend.sync.zscore(app.keys.dispatchers, "me") == NOW + 7
    await beat.leave(r)
    assert H.dispatchers(backend.sync, app.keys) == [("recent", NOW - 10)]
    await r.aclose()


async def test_an_idle_beat_waits_the_idle_interval_and_a_pass_the_busy_one(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    r = backend.async_client()
    beat = H.Heartbeat(app.keys, "me", every_s=0.0, idle_every_s=3600.0)
    assert await beat.beat(r, NOW, idle=True)  # the first beat is never held back
    assert not await beat.beat(r, NOW + 1, idle=True)  # asleep: once per idle interval
    assert await beat.beat(r, NOW + 2)  # a pass (busy): once per busy interval
    assert H.dispatchers(backend.sync, app.keys) == [("me", NOW + 2)]
    assert H.IDLE_BEAT_EVERY_S * 2 <= Thresholds().stale_dispatcher_ms / 1000  # not stale
    await r.aclose()


async def test_a_dispatcher_closed_after_ticks_leaves_no_beat(backend, queue) -> None:
    app = backend.app(queue, clock=FakeClock(NOW))
    d = app.dispatcher(redis=backend.async_client())
    await d.tick()
    assert H.dispatchers(backend.sync, app.keys) == [(d.heartbeat.name, NOW)]
    await d.close()
    assert H.dispatchers(backend.sync, app.keys) == []


async def test_a_dispatcher_whose_clock_is_an_hour_fast_beats_in_server_time(
    real, queue, monkeypatch
) -> None:
    """DESIGN.md invariant 3 (review of issue 18, F4): the beat's score and the trim of old
    beats follow the Redis server's clock, not the dispatcher host's. A host an hour fast
    would otherwise show a beat an hour in the future and trim others' beats an hour early."""
    app = real.app(queue, metrics=Metrics())
    recent = _server_ms(real) - H.KEEP_MS + 600_000  # 50 min old: kept by the server's clock
    real.sync.zadd(app.keys.dispatchers, {"other": recent})
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + HOUR_S)
    d = app.dispatcher(redis=real.async_client())
    await d.tick()  # the first beat, and the first trim
    server = _server_ms(real)
    beat = real.sync.zscore(app.keys.dispatchers, d.heartbeat.name)
    assert beat is not None and abs(beat - server) < NEAR_MS  # not an hour ahead
    assert real.sync.zscore(app.keys.dispatchers, "other") == recent  # not trimmed
    # Between passes (an idle beat in the loop's wait) it keeps the offset it learned.
    assert abs(d.server_time.now_ms() - server) < NEAR_MS
    await d.close()
