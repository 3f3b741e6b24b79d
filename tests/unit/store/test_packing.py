"""Asyncio connections pack commands in C (zsched/store/packing.py): the same bytes as
redis-py's own packer, its errors for what it refuses, and a working client."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rex
from redis.asyncio.connection import Connection, SSLConnection

from zsched.store.connection import async_client, async_from_sync, sync_client
from zsched.store.packing import CPacked, c_packed

ARGS = [
    ("EVALSHA", "abc", 2, "k1", b"k2", 0.1, 1e20, -5, 12345678901234567890, "é-ü"),
    (b"XADD", "s", "*", "f", b"\x00\xff" * 5000, memoryview(b"mv")),  # over the chunk cutoff
    ("SET", "k", ""),
]


@pytest.mark.parametrize("args", ARGS)
def test_the_bytes_are_redis_pys(args) -> None:
    ours, theirs = c_packed(Connection)(), Connection()
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))
    assert len(ours.pack_command(*args)) == 1  # one C call, one buffer


@pytest.mark.parametrize("bad", [True, None])
def test_what_hiredis_refuses_gets_redis_pys_error(bad) -> None:
    ours, theirs = c_packed(Connection)(), Connection()
    with pytest.raises(rex.DataError) as got:
        ours.pack_command("SET", "k", bad)
    with pytest.raises(rex.DataError) as want:
        theirs.pack_command("SET", "k", bad)
    assert str(got.value) == str(want.value)


def test_what_only_redis_py_packs_is_packed_by_it() -> None:
    ours, theirs = c_packed(Connection)(), Connection()
    args = ("SET", "k", bytearray(b"x"))
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))


def test_a_strided_memoryview_is_not_packed_by_hiredis() -> None:
    # hiredis ignores a view's stride: memoryview(b"abcdef")[::2] went out as b"abc", not
    # b"ace" (found in review). redis-py's packer keeps the view as it is (sending it then
    # fails with its TypeError): ours now does the same.
    ours, theirs = c_packed(Connection)(), Connection()
    strided = memoryview(b"abcdef")[::2]
    assert ours.pack_command("SET", "k", strided) == theirs.pack_command("SET", "k", strided)
    flat = memoryview(b"abcdef")[1:4]  # a contiguous view is hiredis's: the same bytes
    assert len(ours.pack_command("SET", "k", flat)) == 1
    assert b"".join(ours.pack_command("SET", "k", flat)) == b"".join(
        theirs.pack_command("SET", "k", flat)
    )


def test_words_in_the_command_name_and_other_encodings_go_redis_pys_way() -> None:
    ours = c_packed(Connection)()
    assert ours.pack_command("CONFIG GET", "maxmemory") == Connection().pack_command(
        "CONFIG GET", "maxmemory"
    )
    latin = c_packed(Connection)(encoding="latin-1")
    assert b"\xe9" in b"".join(latin.pack_command("SET", "k", "é"))


def test_a_class_is_made_once_and_keeps_its_name() -> None:
    made = c_packed(SSLConnection)
    assert made is c_packed(SSLConnection) and c_packed(made) is made
    assert made.__name__ == "SSLConnection" and issubclass(made, SSLConnection)


async def test_our_asyncio_clients_pack_in_c_and_work(redis_url) -> None:
    sync = sync_client(redis_url)
    for client in (async_client(redis_url), async_from_sync(sync)):
        assert issubclass(client.connection_pool.connection_class, CPacked)
        sha = await client.script_load("return {KEYS[1], ARGV[1], ARGV[2]}")
        assert await client.evalsha(sha, 1, "k", "é", 7) == [b"k", "é".encode(), b"7"]
        pipe = client.pipeline(transaction=False)
        pipe.set("packing-k", b"\x00v")
        pipe.get("packing-k")
        assert await pipe.execute() == [True, b"\x00v"]
        with pytest.raises(rex.DataError):
            await client.set("packing-k", True)
        await client.aclose()
    sync.close()


async def test_a_users_own_client_is_left_as_it_is(redis_url) -> None:
    client = aioredis.Redis.from_url(redis_url)
    assert not issubclass(client.connection_pool.connection_class, CPacked)
    await client.aclose()
