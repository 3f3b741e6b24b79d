"""Runner.start executes a run up to its first wait inside the call: a handler that never
waits needs no asyncio task; one that waits goes on in a task of its own, in the run's own
context, and a cancel (shutdown, app.cancel) still reaches it where it waits."""

from __future__ import annotations

import asyncio
import contextvars

from zsched.worker.tasks import RunInfo, current_run, run_info

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="caller's")


def test_run_info_builds_the_same_run_info_as_its_class() -> None:
    args = ("r", "t", 2, None, "q", "s", 3, None)
    assert run_info(*args) == RunInfo(*args)  # type: ignore[arg-type]
    assert vars(run_info(*args)) == vars(RunInfo(*args))  # type: ignore[arg-type]


async def test_a_handler_that_never_waits_is_done_within_start(real, queue) -> None:
    app = real.app(queue)
    seen: list[str] = []

    @app.task(name="quick")
    async def quick(payload):
        seen.append(current_run().run_id)
        MARK.set("the run's")  # a run's context is its own, as a task's is

    ids = [app.enqueue("quick", i) for i in range(3)]
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    await w.setup()
    assert (await d.tick()).moved == 3
    for delivery in await w.reader.read(10, None):
        w.runner.start(delivery)
    assert seen == ids  # in stream order, before start returned
    assert not w.runner.tasks and not w.running
    assert [a[1] for a in w.writer.acks] == ids
    assert MARK.get() == "caller's"
    await w.flush()
    assert [app.get_run(i).state for i in ids] == ["done"] * 3
    await d.close()
    await w.close()


async def test_a_handler_that_waits_goes_on_in_a_task_and_can_be_cancelled(real, queue) -> None:
    app = real.app(queue)
    started, release = asyncio.Event(), asyncio.Event()
    after: list[str] = []

    @app.task(name="waits")
    async def waits(payload):
        MARK.set(f"run {payload}")
        started.set()
        await release.wait()
        after.append(f"{MARK.get()} {current_run().run_id}")

    first = app.enqueue("waits", 1)
    app.enqueue("waits", 2)
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    await w.setup()
    assert (await d.tick()).moved == 2
    one, two = await w.reader.read(10, None)
    w.runner.start(one)
    w.runner.start(two)
    assert started.is_set() and len(w.runner.tasks) == 2 and MARK.get() == "caller's"
    assert two.exec_task is not None
    two.exec_task.cancel()  # as shutdown does: the run ends without an outcome
    release.set()
    await w.runner.drain()
    assert after == [f"run 1 {first}"]
    assert [a[1] for a in w.writer.acks] == [first]
    assert w.writer.has_outcome(two.entry_id) is False and not w.running
    await d.close()
    await w.close()
