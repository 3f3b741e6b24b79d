"""A sync handler's `timeout` (issue 18, defect 7). Python cannot stop a thread, so a timed-out
handler keeps its thread: that lost capacity is shown (a gauge and a log line naming the run),
no other run is charged for it, and the run's retry never starts beside its own attempt."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from typing import Any

import zsched
from zsched.protocol.keys import GROUP
from zsched.protocol.replies import HoldCode
from zsched.store import scripts as S

#: Only a net for a wait on a thread (a broken handler must not hang the run); the events
#: below, not this, decide every outcome.
NET_S = 60.0


class _Stuck(logging.Handler):
    """Sets `seen` when the worker logs that a sync handler outlived its timeout."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "still running" in record.getMessage():
            self.messages.append(record.getMessage())
            self.seen.set()  # logged on the worker's event loop: this loop


class _HandedBack(logging.Handler):
    """Sets `seen` when a worker logs that it handed back runs waiting behind stuck slots."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = asyncio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "read ahead for other workers" in record.getMessage():
            self.messages.append(record.getMessage())
            self.seen.set()  # logged on the worker's event loop: this loop


def _held_by(real: Any, app: Any) -> dict[str, str]:
    """run id -> consumer, of every ready entry some worker read and has not acked."""
    ids = {eid: f[b"run_id"].decode() for eid, f in real.sync.xrange(app.keys.ready)}
    pending = real.sync.xpending_range(app.keys.ready, GROUP, "-", "+", 100)
    return {ids[p["message_id"]]: p["consumer"].decode() for p in pending if p["message_id"] in ids}


async def test_a_stuck_sync_handler_costs_capacity_not_other_runs_attempts(real, queue) -> None:
    """concurrency=1: r1's handler is stuck past its timeout (it waits for a gate the test
    opens only once the worker has said so); r2, read in the same batch, is not started (so
    no timer of its own runs against r1's thread): with its only slot stuck, the worker hands
    it back, same attempt, and reads nothing while the slot stays stuck. After the gate r2
    runs once, at attempt 1, and r1's retry never starts beside its own timed-out attempt."""
    app = real.app(queue)
    gate = threading.Event()
    ended = {("r1", 1): threading.Event(), ("r1", 2): threading.Event(),
             ("r2", 1): threading.Event()}  # fmt: skip
    lock = threading.Lock()
    active: Counter[str] = Counter()
    most: Counter[str] = Counter()
    calls: list[tuple[str, int]] = []

    def body() -> None:
        info = zsched.current_run()
        with lock:
            calls.append((info.run_id, info.attempt))
            active[info.run_id] += 1
            most[info.run_id] = max(most[info.run_id], active[info.run_id])
        try:
            if (info.run_id, info.attempt) == ("r1", 1):
                gate.wait(NET_S)  # stuck well past its timeout: until the test opens it
        finally:
            with lock:
                active[info.run_id] -= 1
            if (info.run_id, info.attempt) in ended:
                ended[info.run_id, info.attempt].set()

    app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)(lambda p: body())
    # r2's own timeout is not what is tested (it never times out): generous, so a loaded
    # host's slow thread hand-over cannot fail it.
    app.task(name="quick", timeout=30, max_attempts=3, backoff=0)(lambda p: body())
    app.enqueue("slow", None, run_id="r1")
    app.enqueue("quick", None, run_id="r2")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()  # both on the stream, r1 first: one read takes them both
    w = app.worker(redis=real.async_client(), concurrency=1)
    stuck_log, handed = _Stuck(), _HandedBack()
    logging.getLogger("zsched.worker.worker").addHandler(stuck_log)
    logging.getLogger("zsched.worker.worker").addHandler(handed)
    stop = asyncio.Event()
    loops = [asyncio.create_task(d.run(stop)), asyncio.create_task(w.run(stop))]
    stuck = app.metrics.stuck_handlers.labels(queue)
    try:
        await stuck_log.seen.wait()  # r1 outlived its timeout; its thread still runs
        assert any("r1" in m for m in stuck_log.messages)
        assert stuck._value.get() == 1
        await asyncio.wait_for(handed.seen.wait(), NET_S)  # its only slot stuck: r2 handed back
        assert any("r2" in m for m in handed.messages)
        assert [x.run_id for x in w.runner.waiting] == []
        assert [x.run_id for x in w.runner.running.values()] == ["r1"]
        assert _held_by(real, app) == {"r1": w.consumer}
        assert [c for c in calls if c[0] == "r2"] == []
        gate.set()
        for ev in ended.values():  # r1's late return, its retry and r2, each once
            assert await asyncio.to_thread(ev.wait, NET_S)
    finally:
        gate.set()
        stop.set()
        await asyncio.gather(*loops)
        logging.getLogger("zsched.worker.worker").removeHandler(stuck_log)
        logging.getLogger("zsched.worker.worker").removeHandler(handed)
        await d.close()
        await w.close()
    assert [c for c in calls if c[0] == "r2"] == [("r2", 1)]  # not charged for r1's thread
    assert app.metrics.stuck_handbacks.labels(queue)._value.get() == 1
    assert [c for c in calls if c[0] == "r1"] == [("r1", 1), ("r1", 2)]
    assert most["r1"] == 1  # the retry did not start beside its own timed-out attempt
    assert real.sync.zscore(app.keys.done, "r1") and real.sync.zscore(app.keys.done, "r2")
    assert stuck._value.get() == 0
    assert real.sync.xlen(app.keys.dead) == 0
    # r1's first attempt returned (did its work) after its timeout, and was retried: counted
    # as a duplicate execution; r2, which never timed out, is not.
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 1


async def test_runs_waiting_behind_stuck_slots_go_to_another_worker(real, queue) -> None:
    """Worker A (concurrency 1): r1's sync handler is stuck past its timeout (a gate only the
    test opens); r2, read in the same batch, waits in A for the slot. With every slot stuck,
    A hands r2 back (same attempt, not charged) and worker B, started after, runs it while
    A's thread is still stuck; zsched_worker_stuck_handbacks_total counts it. A reads nothing
    more meanwhile: r3, enqueued then, goes to B too. (Before: r2 stayed in A, its hold
    renewed, for as long as the thread hung; B never got it.)"""
    app = real.app(queue)
    gate = threading.Event()
    ended = {r: threading.Event() for r in (("r2", 1), ("r3", 1), ("r1", 2))}
    calls: list[tuple[str, int, int]] = []  # run id, attempt, thread

    def body() -> None:
        info = zsched.current_run()
        calls.append((info.run_id, info.attempt, threading.get_ident()))
        if (info.run_id, info.attempt) == ("r1", 1):
            gate.wait(3 * NET_S)  # stuck past its timeout and the test's waits: until opened
        elif (info.run_id, info.attempt) in ended:
            ended[info.run_id, info.attempt].set()

    app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)(lambda p: body())
    app.task(name="quick", max_attempts=3, backoff=0)(lambda p: body())
    app.enqueue("slow", None, run_id="r1")
    app.enqueue("quick", None, run_id="r2")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()  # both on the stream, r1 first: A's first read takes them both
    a = app.worker(redis=real.async_client(), concurrency=1)
    b = app.worker(redis=real.async_client(), concurrency=2)
    stuck_log, handed = _Stuck(), _HandedBack()
    logger = logging.getLogger("zsched.worker.worker")
    logger.addHandler(stuck_log)
    logger.addHandler(handed)
    stop = asyncio.Event()
    loops = [asyncio.create_task(a.run(stop))]
    counted = app.metrics.stuck_handbacks.labels(queue)
    given: list[tuple[str, str]] = []
    release_waiting = a.holds.release_waiting

    async def spy(ds: list[Any]) -> list[int]:
        given.extend((x.entry_id, x.run_id) for x in ds)
        return await release_waiting(ds)

    a.holds.release_waiting = spy  # type: ignore[method-assign]
    r1_acked = asyncio.Event()  # the retry's ack written (a stop must not race it)
    for w in (a, b):
        w.writer._write_acks = _on_ack(w.writer._write_acks, "r1", r1_acked)  # type: ignore[method-assign]
    try:
        await stuck_log.seen.wait()  # r1 outlived its timeout; its thread still runs
        loops += [asyncio.create_task(d.run(stop)), asyncio.create_task(b.run(stop))]
        assert await asyncio.to_thread(ended["r2", 1].wait, NET_S)  # B ran it
        await asyncio.wait_for(handed.seen.wait(), NET_S)
        assert any("r2" in m and "r1" in m for m in handed.messages)  # the log names both
        app.enqueue("quick", None, run_id="r3")
        assert await asyncio.to_thread(ended["r3", 1].wait, NET_S)
        assert not gate.is_set() and a.runner.stuck == ["r1"]  # all while A's thread hung
        assert counted._value.get() == 1  # r2 only: A did not read r3
        # A holds r1 only (B's acks may not be written yet).
        assert [r for r, c in _held_by(real, app).items() if c == a.consumer] == ["r1"]
        # The fence: A can write no outcome for the entry it handed back.
        assert [r for _e, r in given] == ["r2"]
        window = a.ctx.queue_settings.dedupe_window_ms
        refused = await a.ctx.scripts.run(S.ack(app.keys, a.consumer, given, now_ms=None,
                                                dedupe_window_ms=window))  # fmt: skip
        dead = await a.ctx.scripts.run(S.dead(app.keys, a.consumer,
                                              [(*given[0], "late", b"x")], now_ms=None))  # fmt: skip
        assert HoldCode.OK not in refused + dead
        assert real.sync.xlen(app.keys.dead) == 0
        stuck_thread = next(t for r, _n, t in calls if r == "r1")
        assert [(r, n) for r, n, t in calls if t != stuck_thread] == [("r2", 1), ("r3", 1)]
        gate.set()
        assert await asyncio.to_thread(ended["r1", 2].wait, NET_S)  # r1's retry, by A or B
        await asyncio.wait_for(r1_acked.wait(), NET_S)
    finally:
        gate.set()
        stop.set()
        await asyncio.gather(*loops)
        logger.removeHandler(stuck_log)
        logger.removeHandler(handed)
        await d.close()
        await a.close()
        await b.close()
    assert [(r, n) for r, n, _t in calls] == [("r1", 1), ("r2", 1), ("r3", 1), ("r1", 2)]
    assert real.sync.xlen(app.keys.dead) == 0  # (the stop wrote r1's outcome)
    assert all(real.sync.zscore(app.keys.done, r) for r in ("r1", "r2", "r3"))
    assert counted._value.get() == 1


def _on_ack(write: Any, run_id: str, written: asyncio.Event) -> Any:
    """A Writer._write_acks that sets `written` once a call with `run_id`'s ack returned."""

    async def spy(acks: list[tuple[str, str]], now: int | None) -> None:
        ours = any(r == run_id for _e, r in acks)  # (the write empties `acks`)
        await write(acks, now)
        if ours:
            written.set()

    return spy


async def test_an_async_handler_past_its_timeout_is_retried(real, queue) -> None:
    app = real.app(queue)
    attempts: list[int] = []

    @app.task(name="a", timeout=0.1, max_attempts=2, backoff=0)
    async def a(payload: Any) -> None:
        attempts.append(zsched.current_run().attempt)
        if len(attempts) == 1:
            await asyncio.Event().wait()  # never ends by itself: only its timeout stops it

    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    app.enqueue("a", None, run_id="a1")
    await d.tick()
    await w.tick()
    await d.tick()
    await w.tick()
    assert attempts == [1, 2]
    assert real.sync.zscore(app.keys.done, "a1")
    await d.close()
    await w.close()


async def test_a_sync_handler_that_raises_after_its_timeout_is_no_duplicate(real, queue) -> None:
    """Only a late *return* is a duplicate execution (its effect happened, and the retry runs
    it again); a late raise, or a late return on the last attempt (dead, no rerun), is not.
    Each attempt is held past its timeout by a gate opened once the worker logged it stuck."""
    app = real.app(queue)
    attempts: list[int] = []
    gates = [threading.Event(), threading.Event()]

    @app.task(name="s", timeout=0.05, max_attempts=2, backoff=0)
    def s(payload: Any) -> None:
        attempts.append(zsched.current_run().attempt)
        gates[len(attempts) - 1].wait(NET_S)  # past its timeout, then:
        if len(attempts) == 1:  # attempt 1 raises, attempt 2 returns
            raise RuntimeError("late failure")

    d = app.dispatcher(redis=real.async_client(), rules=False)
    w = app.worker(redis=real.async_client())
    stuck_log = _Stuck()
    logging.getLogger("zsched.worker.worker").addHandler(stuck_log)
    app.enqueue("s", None, run_id="s1")
    try:
        for gate in gates:
            await d.tick()
            tick = asyncio.create_task(w.tick())  # returns once the attempt's thread ends
            await stuck_log.seen.wait()
            stuck_log.seen.clear()
            gate.set()
            assert await tick == 1
    finally:
        for gate in gates:
            gate.set()
        logging.getLogger("zsched.worker.worker").removeHandler(stuck_log)
    assert attempts == [1, 2]
    assert len(stuck_log.messages) == 2  # both timed out
    assert real.sync.xlen(app.keys.dead) == 1  # attempt 2 timed out too: the last one
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 0
    await d.close()
    await w.close()


async def test_a_run_whose_thread_outlives_the_shutdown_is_not_started_beside_it(
    real, queue
) -> None:
    """Worker A's sync handler for r1 is stuck past its timeout (a gate only the test opens)
    when A is stopped. A's process lives on, so the thread does too: A must not hand r1 back
    (another worker would start it again, attempt 1, beside that thread); it keeps r1 held,
    renewed, and writes its outcome when the thread returns. Only then does worker B run the
    retry. (Before: handed back after the grace, B ran ("r1", 1) again beside the thread and
    no duplicate was counted.)"""
    app = real.app(queue)
    gate, returned = threading.Event(), threading.Event()
    calls: list[tuple[str, int]] = []

    @app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)
    def slow(payload: Any) -> None:
        info = zsched.current_run()
        calls.append((info.run_id, info.attempt))
        if len(calls) == 1:  # (a second start of attempt 1, beside it, must not block)
            gate.wait(NET_S)  # stuck past its timeout and the shutdown: until the test opens it
            returned.set()

    app.enqueue("slow", None, run_id="r1")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()
    # A short visibility timeout: A renews every 100 ms, so the test sees renewals after the
    # shutdown without waiting long (it awaits one, it does not time it).
    a = app.worker(redis=real.async_client(), concurrency=1, shutdown_grace_ms=50,
                   visibility_timeout_ms=300)  # fmt: skip
    b = app.worker(redis=real.async_client(), concurrency=1)
    stuck_log = _Stuck()
    held_log: list[str] = []
    logger = logging.getLogger("zsched.worker.worker")
    logger.addHandler(stuck_log)
    stop = asyncio.Event()
    ta = asyncio.create_task(a.run(stop))
    try:
        await stuck_log.seen.wait()  # r1 outlived its timeout; its thread still runs
        seen_held = _Kept(held_log)
        logger.addHandler(seen_held)
        stop.set()
        await ta  # A stopped (its grace passed), the thread still runs
        await d.tick()
        # B has nothing to start while A's thread runs (before: it ran ("r1", 1) again).
        assert (await b.tick(), calls) == (0, [("r1", 1)])
        assert _held_by(real, app) == {"r1": a.consumer}
        assert int(real.sync.hget(app.keys.delayed, "n") or 0) == 0  # not handed back
        assert any("r1" in m for m in held_log)  # the warning names the run
        assert not gate.is_set() and a.keeping is not None
        renewed = asyncio.Event()
        renew = a.holds.renew

        async def spy() -> int:
            lost = await renew()
            renewed.set()
            return lost

        a.holds.renew = spy  # type: ignore[method-assign]
        await renewed.wait()  # A still renews r1's hold after its shutdown
        assert _held_by(real, app) == {"r1": a.consumer}
        gate.set()
        assert await asyncio.to_thread(returned.wait, NET_S)
        await a.keeping  # A writes the timed-out attempt's retry, then leaves the group
        assert _held_by(real, app) == {}
        await d.tick()
        assert await b.tick() == 1
    finally:
        gate.set()
        stop.set()
        logger.removeHandler(stuck_log)
        await asyncio.gather(ta, return_exceptions=True)
        await a.close()
        await b.close()
        await d.close()
    assert calls == [("r1", 1), ("r1", 2)]
    assert real.sync.zscore(app.keys.done, "r1")
    # Attempt 1 returned (did its work) after its timeout, and was retried: a duplicate.
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 1


class _Kept(logging.Handler):
    """Collects the worker's warnings that a run stays held past its shutdown."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if "stays held" in record.getMessage():
            self.into.append(record.getMessage())


async def _stopped_while_stuck(real: Any, app: Any, gate: threading.Event,
                               exiting: bool) -> Any:  # fmt: skip
    """Worker of `app`, stopped while its sync handler for r1 (task "slow") is stuck past its
    timeout on `gate`; returns it once its run() has returned."""
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()
    await d.close()
    w = app.worker(redis=real.async_client(), concurrency=1, shutdown_grace_ms=50)
    stuck_log = _Stuck()
    logger = logging.getLogger("zsched.worker.worker")
    logger.addHandler(stuck_log)
    stop = asyncio.Event()
    t = asyncio.create_task(w.run(stop, exiting=exiting))
    try:
        await stuck_log.seen.wait()
    finally:
        logger.removeHandler(stuck_log)
        stop.set()
        await t
    return w


async def test_closing_a_worker_waits_for_a_thread_that_outlived_its_shutdown(real, queue) -> None:
    """close() while a kept run's thread still runs: it keeps holding the run and waits for
    the thread (which keeps the process alive anyway), then writes its outcome."""
    app = real.app(queue)
    gate = threading.Event()

    @app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)
    def slow(payload: Any) -> None:
        gate.wait(NET_S)

    app.enqueue("slow", None, run_id="r1")
    waits = asyncio.Event()

    class _Waits(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "close waits" in record.getMessage() and "r1" in record.getMessage():
                waits.set()

    logger = logging.getLogger("zsched.worker.worker")
    seen = _Waits(logging.WARNING)
    logger.addHandler(seen)
    try:
        w = await _stopped_while_stuck(real, app, gate, exiting=False)
        assert _held_by(real, app) == {"r1": w.consumer}
        closing = asyncio.create_task(w.close())
        await waits.wait()  # close is waiting for r1's thread
        assert _held_by(real, app) == {"r1": w.consumer}  # still held, renewed
        gate.set()
        await closing
    finally:
        gate.set()
        logger.removeHandler(seen)
    assert _held_by(real, app) == {}
    assert int(real.sync.hget(app.keys.delayed, "n") or 0) == 1  # its retry, attempt 2
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 1


async def test_a_worker_whose_process_exits_hands_back_a_run_its_stuck_thread_runs(
    real, queue
) -> None:
    """`run(stop, exiting=True)` (the CLI, which exits right after, killing the thread):
    the run is handed back at once, same attempt, like every other run it holds."""
    app = real.app(queue)
    gate = threading.Event()

    @app.task(name="slow", timeout=0.2, max_attempts=3, backoff=0)
    def slow(payload: Any) -> None:
        gate.wait(NET_S)

    app.enqueue("slow", None, run_id="r1")
    try:
        w = await _stopped_while_stuck(real, app, gate, exiting=True)
        assert w.keeping is None
        assert _held_by(real, app) == {}
        assert int(real.sync.hget(app.keys.delayed, "n") or 0) == 1
    finally:
        gate.set()
    await w.close()


async def test_each_run_kept_past_the_shutdown_is_written_when_its_own_thread_returns(
    real, queue
) -> None:
    """A sync handler without a timeout that outlives the shutdown grace is kept too, and
    acked when it returns: two such runs, the one whose thread returns first has its outcome
    written then, while the other is still held."""
    app = real.app(queue)
    gates = {"r1": threading.Event(), "r2": threading.Event()}
    stuck = {"r1": threading.Event(), "r2": threading.Event()}

    @app.task(name="slow")
    def slow(payload: Any) -> None:
        run_id = zsched.current_run().run_id
        stuck[run_id].set()
        gates[run_id].wait(NET_S)

    for run_id in gates:
        app.enqueue("slow", None, run_id=run_id)
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()
    await d.close()
    w = app.worker(redis=real.async_client(), concurrency=2, shutdown_grace_ms=50)
    stop = asyncio.Event()
    t = asyncio.create_task(w.run(stop))
    try:
        for ev in stuck.values():
            assert await asyncio.to_thread(ev.wait, NET_S)  # both handlers started
        stop.set()
        await t
        assert _held_by(real, app) == {"r1": w.consumer, "r2": w.consumer}
        written = asyncio.Event()
        flush = w.flush

        async def spy() -> None:
            await flush()
            if "r1" not in _held_by(real, app):
                written.set()

        w.flush = spy  # type: ignore[method-assign]
        gates["r1"].set()
        await written.wait()  # r1's ack written while r2's thread still runs
        assert _held_by(real, app) == {"r2": w.consumer}
        assert not gates["r2"].is_set()
    finally:
        for gate in gates.values():
            gate.set()
        stop.set()
        await asyncio.gather(t, return_exceptions=True)
        await w.close()
    assert _held_by(real, app) == {}
    assert real.sync.zscore(app.keys.done, "r1") and real.sync.zscore(app.keys.done, "r2")
    assert app.metrics.duplicates.labels(queue, "timeout")._value.get() == 0


async def test_an_async_handler_is_cancelled_before_its_run_is_handed_back(real, queue) -> None:
    """Shutdown past the grace: an async handler still running is cancelled, and has ended,
    before its run is handed back, so no other worker can start it while it still runs here
    (before: handed back first, cancelled after, so it ran on during the hand-back)."""
    app = real.app(queue)
    started = asyncio.Event()
    held_at_cancel: list[dict[str, str]] = []

    @app.task(name="a")
    async def a(payload: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never ends by itself
        except asyncio.CancelledError:
            held_at_cancel.append(_held_by(real, app))
            raise

    app.enqueue("a", None, run_id="a1")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()
    await d.close()
    w = app.worker(redis=real.async_client(), shutdown_grace_ms=50)
    stop = asyncio.Event()
    t = asyncio.create_task(w.run(stop))
    await started.wait()
    stop.set()
    await t
    assert held_at_cancel == [{"a1": w.consumer}]  # still held when it was cancelled
    assert _held_by(real, app) == {}  # then handed back
    assert int(real.sync.hget(app.keys.delayed, "n") or 0) == 1
    assert w.keeping is None
    await w.close()


async def test_an_async_handler_that_ignores_its_cancel_at_shutdown_keeps_its_run_held(
    real, queue
) -> None:
    """An async handler that swallows the shutdown's cancel and goes on is still running:
    its run stays held (not handed back) until it returns, then it is acked."""
    app = real.app(queue)
    started, gate = asyncio.Event(), asyncio.Event()

    @app.task(name="a")
    async def a(payload: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await gate.wait()  # goes on after its cancel, until the test opens the gate

    app.enqueue("a", None, run_id="a1")
    d = app.dispatcher(redis=real.async_client(), rules=False)
    await d.tick()
    await d.close()
    w = app.worker(redis=real.async_client(), shutdown_grace_ms=50)
    stop = asyncio.Event()
    t = asyncio.create_task(w.run(stop))
    try:
        await started.wait()
        stop.set()
        await t
        assert _held_by(real, app) == {"a1": w.consumer}
        assert int(real.sync.hget(app.keys.delayed, "n") or 0) == 0
        assert w.keeping is not None
        gate.set()
        await w.keeping
    finally:
        gate.set()
        stop.set()
        await asyncio.gather(t, return_exceptions=True)
        await w.close()
    assert _held_by(real, app) == {}
    assert real.sync.zscore(app.keys.done, "a1")
