"""The worker's reads skip redis-py's reply parsing (issue 25, session 21).

`from_reply` turns an unparsed XREADGROUP reply into the same Deliveries that redis-py's
parse plus `from_entry` gave, taking the short way for the dispatch script's three fields in
its order and the old way for any other entry. `raw_reads` leaves every other XREADGROUP
call on the client parsed as before.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from zsched.protocol.keys import GROUP
from zsched.worker.delivery import RAW, Delivery, from_entry, from_reply, raw_reads

ENTRIES: list[dict[str, Any]] = [
    # as dispatch.lua writes them: the short way
    {"run_id": "a", "envelope": b"\x94\x02\xa4noop\xc0\x01", "due_ms": "1733000000000"},
    {"run_id": "b\xe9", "envelope": b"\x00\x01\xff", "due_ms": "12"},
    # anything else: the old way
    {"envelope": b"env-c", "run_id": "c", "due_ms": "5"},  # another order
    {"run_id": "d", "envelope": b"env-d"},  # no due (an older dispatcher's entry)
    {"run_id": "e", "envelope": b"env-e", "due_ms": "soon"},  # a due that is not a number
    {"run_id": "f", "envelope": b"env-f", "due_ms": "7", "extra": "x"},  # a field more
    {"other": "g"},  # neither field: dead-lettered by the runner, as before
]


def _fields(d: Delivery) -> tuple[str, str, bytes, int | None]:
    return d.entry_id, d.run_id, d.raw, d.due_ms


async def test_raw_reply_gives_the_deliveries_the_parsed_reply_gave(aclient: Any) -> None:
    stream = f"zsched:{{raw{uuid.uuid4().hex}}}:ready"
    for f in ENTRIES:
        await aclient.xadd(stream, f)
    await aclient.xgroup_create(stream, GROUP, id="0")
    await aclient.xgroup_create(stream, "parsed", id="0")
    raw_reads(aclient)
    raw = await aclient.execute_command(
        "XREADGROUP", "GROUP", GROUP, "c1", "COUNT", 100, "STREAMS", stream, ">", **{RAW: True}
    )
    assert isinstance(raw[0][1][0][1], list)  # unparsed: the fields as a flat list
    parsed = await aclient.xreadgroup("parsed", "c1", {stream: ">"}, count=100)
    want = [from_entry(eid, f) for _s, entries in parsed for eid, f in entries]
    got = from_reply(raw)
    assert [_fields(d) for d in got] == [_fields(d) for d in want]
    assert [d.run_id for d in got] == ["a", "b\xe9", "c", "d", "e", "f", ""]
    assert [d.due_ms for d in got] == [1733000000000, 12, 5, None, None, 7, None]


async def test_other_reads_stay_parsed_and_the_hook_goes_on_once(aclient: Any) -> None:
    stream = f"zsched:{{raw{uuid.uuid4().hex}}}:ready"
    await aclient.xadd(stream, ENTRIES[0])
    await aclient.xgroup_create(stream, GROUP, id="0")
    raw_reads(aclient)
    hook = aclient.response_callbacks["XREADGROUP"]
    raw_reads(aclient)
    assert aclient.response_callbacks["XREADGROUP"] is hook
    parsed = await aclient.xreadgroup(GROUP, "c1", {stream: ">"}, count=10)
    [[stream, [(entry_id, fields)]]] = parsed
    assert fields == {b"run_id": b"a", b"envelope": ENTRIES[0]["envelope"],
                      b"due_ms": b"1733000000000"}  # fmt: skip
    assert from_reply(None) == [] and from_reply([]) == []


async def _run_five(backend: Any, client: Any) -> bool:
    """Five runs through a worker reading with `client`: each ran once. Whether it read raw."""
    app = backend.app(f"rawq{uuid.uuid4().hex[:6]}")
    seen: list[int] = []

    @app.task(name="t")
    async def t(p: int) -> None:
        seen.append(p)

    app.enqueue_many([("t", i) for i in range(5)])
    d = app.dispatcher(redis=backend.async_client())
    w = app.worker(redis=client, concurrency=10)
    try:
        while (await d.tick()).moved:
            pass
        assert await w.tick() == 5
        await w.runner.drain()
        assert sorted(seen) == [0, 1, 2, 3, 4]
        return bool(w.reader.raw)
    finally:
        await w.close()
        await d.close()


async def test_a_worker_reads_runs_the_short_way(backend: Any) -> None:
    client = backend.async_client()
    assert await _run_five(backend, client)
    assert getattr(client.response_callbacks["XREADGROUP"], "zsched_raw", False)


async def test_a_read_of_no_entries_is_refused_as_redis_py_refused_it(backend: Any) -> None:
    # COUNT 0 is no limit to Redis: it would read the whole stream.
    w = backend.app(f"rawq{uuid.uuid4().hex[:6]}").worker(redis=backend.async_client())
    try:
        for count in (0, -1):
            with pytest.raises(redis.exceptions.DataError, match="positive integer"):
                await w.reader.read(count, None)
    finally:
        await w.close()


def _unpinned(backend: Any) -> Any:
    """An asyncio client of the user's own, on redis-py's default protocol (RESP3 where the
    server speaks it: XREADGROUP replies are maps, and redis-py parses them per connection)."""
    if backend.name == "redis":
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(backend.url)
    import fakeredis

    return fakeredis.FakeAsyncRedis(server=backend.server)


async def test_a_client_not_pinned_to_resp2_reads_parsed(backend: Any) -> None:
    client = _unpinned(backend)
    assert raw_reads(client) is False
    assert not getattr(client.response_callbacks.get("XREADGROUP"), "zsched_raw", False)
    assert not await _run_five(backend, client)
