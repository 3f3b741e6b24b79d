"""Every script touches the keys of one hash tag, so each call lands on one cluster slot.

The calls run on a real Redis Cluster; a key outside the partition's tag would make redis-py
refuse the call ("all keys must map to the same key slot") or the server answer CROSSSLOT.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis.exceptions as rex
from redis.crc import key_slot

from zsched.protocol.envelope import Envelope
from zsched.protocol.keys import QueueKeys
from zsched.store import scripts as S

ENV = Envelope("r1", "t", {"x": 1}, 1000, 1000, 1000).encode()


def wrapper_calls(k: QueueKeys) -> dict[str, S.Call[Any]]:
    """One call per core wrapper in scripts.py, with arguments each script accepts. (The rule
    scripts' wrappers still change often; their keys are checked through their headers.)"""
    now = None
    calls: dict[str, S.Call[Any]] = {
        "enqueue": S.enqueue(k, [("r1", 1000, "t", ENV)], now_ms=now, dedupe_window_ms=1000,
                             max_envelope_bytes=10_000),
        "dispatch": S.dispatch(k, now_ms=now, limit=10, max_backlog=0),
        "ack": S.ack(k, "c", [("1-1", "r1")], now_ms=now, dedupe_window_ms=1000),
        "retry": S.retry(k, "c", [("1-1", "r1", 10, ENV)], now_ms=now),
        "release": S.release(k, "c", [("1-1", "r1")], now_ms=now),
        "dead": S.dead(k, "c", [("1-1", "r1", "why", ENV)], now_ms=now),
        "reclaim": S.reclaim(k, "c", now_ms=now, min_idle_ms=0, count=10, max_deliveries=5),
        "renew": S.renew(k, "c", ["1-1"]),
        "cancel": S.cancel(k, "r1"),
        "replay": S.replay(k, [("1-1", "r1", ENV)], now_ms=now),
    }  # fmt: skip
    return calls


def header_keys(name: str, k: QueueKeys) -> list[str]:
    """The KEYS a script's header names, built from QueueKeys (per-rule keys for rule 's1')."""
    header = "\n".join(x for x in S.source(name).splitlines() if x.startswith("--"))
    named = dict(re.findall(r"KEYS\[(\d+)\]\s+(\w+)", header))
    out = []
    for i in range(1, len(named) + 1):
        attr = getattr(k, named[str(i)])
        out.append(attr("s1") if callable(attr) else attr)
    return out


def lua_names() -> list[str]:
    return sorted(p.stem for p in S.lua_dir().glob("*.lua"))


def test_every_wrapper_call_and_script_header_keeps_its_keys_in_one_slot() -> None:
    k = QueueKeys("emails", 5)
    key_sets = {f"{n} wrapper": c.keys for n, c in wrapper_calls(k).items()}
    key_sets.update({f"{n}.lua header": header_keys(n, k) for n in lua_names()})
    for name, keys in key_sets.items():
        assert len({key_slot(x.encode()) for x in keys}) == 1, name
        assert all(k.tag in x for x in keys), name


def slot_error(exc: BaseException) -> bool:
    text = str(exc)
    return "CROSSSLOT" in text or "same key slot" in text or "non local key" in text


def run(rc: Any, name: str, keys: list[str], args: list[Any]) -> None:
    """Run a script on the cluster; a script-level error is fine, a slot error is not."""
    script = rc.register_script(S.source(name))
    try:
        script(keys=keys, args=args)
    except (rex.ResponseError, rex.RedisClusterException) as exc:
        assert not slot_error(exc), f"{name}: {exc}"


def test_the_slot_check_catches_a_key_outside_the_tag(rc: Any) -> None:
    """The check below would see a key that escapes its tag (so it can fail)."""
    k, other = QueueKeys("emails", 5), QueueKeys("emails", 6)
    keys = [k.delayed, other.runs]
    assert key_slot(keys[0].encode()) != key_slot(keys[1].encode())
    with pytest.raises(rex.RedisClusterException) as info:
        rc.register_script(S.source("cancel"))(keys=keys, args=["r1"])
    assert slot_error(info.value)


@pytest.mark.parametrize("partition", [None, 0, 5])
def test_every_script_runs_on_the_cluster_with_the_keys_of_one_tag(rc: Any, partition) -> None:
    k = QueueKeys("ztags", partition)
    rc.xgroup_create(k.ready, "workers", id="0", mkstream=True)
    calls = wrapper_calls(k)
    for name in lua_names():
        if name in calls:
            run(rc, name, calls[name].keys, calls[name].args)
        # Also with the keys its header names: covers scripts that have no wrapper yet.
        run(rc, name, header_keys(name, k), [])
    rc.delete(*k.all_fixed())


def test_the_02_entries_move_aside_and_finish_on_the_cluster(rc: Any) -> None:
    """dispatch.lua renames a zsched 0.2 `entries` hash to `entries:legacy`, a key made inside
    the script (same tag, so same slot), and ack.lua reads a 0.2 run's entry from there."""
    from zsched.store.delayed import tag

    k = QueueKeys("zlegacy", 3)
    rc.xgroup_create(k.ready, "workers", id="0", mkstream=True)
    entry = rc.xadd(k.ready, {"run_id": "old", "envelope": ENV, "due_ms": "1000"}).decode()
    rc.xreadgroup("workers", "c", {k.ready: ">"}, count=10)
    rc.hset(k.runs, "old", tag(1000, ENV))  # as 0.2 left a run on the stream
    rc.hset(k.entries, "old", entry)
    calls = wrapper_calls(k)
    try:
        rc.register_script(S.source("enqueue"))(keys=calls["enqueue"].keys, args=calls["enqueue"].args)
        rc.register_script(S.source("dispatch"))(keys=calls["dispatch"].keys, args=calls["dispatch"].args)
        assert rc.type(k.entries) == b"string" and rc.hget(k.legacy_entries, "old") == entry.encode()
        assert key_slot(k.legacy_entries.encode()) == key_slot(k.entries.encode())
        ack = S.ack(k, "c", [(entry, "old")], now_ms=None, dedupe_window_ms=1000)
        assert rc.register_script(S.source("ack"))(keys=ack.keys, args=ack.args) == [1]
        assert rc.hexists(k.runs, "old") == 0 and rc.exists(k.legacy_entries) == 0
    finally:
        rc.delete(*k.all_fixed())
        for key in rc.scan_iter(match=f"*{k.tag}*"):
            rc.delete(key)
