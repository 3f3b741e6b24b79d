"""SyncPool: sync calls in threads, their results handed to the event loop in batches."""

from __future__ import annotations

import asyncio
import threading

import pytest

from zsched.worker.threads import SyncPool


def test_a_call_returns_its_value_and_raises_its_exception() -> None:
    async def main() -> None:
        pool = SyncPool(2, "t")
        assert await pool.submit(lambda a, b: a + b, 2, 3) == 5

        def boom() -> None:
            raise KeyError("k")

        with pytest.raises(KeyError):
            await pool.submit(boom)
        pool.executor.shutdown(wait=True)

    asyncio.run(main())


def test_calls_that_finish_together_wake_the_loop_once() -> None:
    """Eight calls held at a gate, released at once: their results come back in fewer wakes
    of the loop than calls (one per call through run_in_executor)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakes = 0
        real = loop.call_soon_threadsafe

        def counting(cb, *args, **kw):  # type: ignore[no-untyped-def]
            nonlocal wakes
            wakes += 1
            return real(cb, *args, **kw)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        pool = SyncPool(8, "t")
        gate, started = threading.Event(), threading.Semaphore(0)

        def held(i: int) -> int:
            started.release()
            gate.wait()
            return i

        futs = [pool.submit(held, i) for i in range(8)]
        for _ in range(8):
            await loop.run_in_executor(None, started.acquire)  # all eight are in their threads
        wakes_before = wakes
        # The loop is not running while the gate opens and the threads finish: this thread
        # blocks it until every result is in the pool's list.
        gate.set()
        finished = threading.Event()
        for _ in range(10_000):  # bounded: the eight threads append within microseconds
            if len(pool._done) == 8:
                break
            finished.wait(0.001)
        assert len(pool._done) == 8
        assert await asyncio.gather(*futs) == list(range(8))
        assert wakes - wakes_before == 1
        pool.executor.shutdown(wait=True)

    asyncio.run(main())


def test_a_cancelled_call_is_not_settled() -> None:
    async def main() -> None:
        pool = SyncPool(1, "t")
        gate = threading.Event()
        fut = pool.submit(gate.wait)
        fut.cancel()
        gate.set()
        done = pool.submit(lambda: "after")
        assert await done == "after"  # the cancelled one was skipped, not set (no error)
        assert fut.cancelled()
        pool.executor.shutdown(wait=True)

    asyncio.run(main())
