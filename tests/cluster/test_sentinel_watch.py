"""A sync Sentinel client follows a failover when Sentinel announces it (+switch-master), not
when the old master finally refuses a write (zsched/store/sentinel_watch.py).

SENTINEL FAILOVER leaves the old master a writable master for ~10 s after the switch, until
Sentinel demotes it; whatever a client writes there in that time is lost. These tests write
right after the switch, while the old master still takes writes, and look where it landed.
"""

from __future__ import annotations

import redis
from cluster_harness import _info, wait_until
from sentinel_harness import SentinelGroup

import zsched
from tests.state import delayed_due
from zsched.store.connection import sync_client


def _graceful_failover(g: SentinelGroup, sentinel_port: int | None = None) -> int:
    """SENTINEL FAILOVER through one Sentinel; returns the old master's port."""
    old = g.current_master_port()
    s = redis.Redis(port=sentinel_port or g.sentinel_ports[0])
    s.execute_command("SENTINEL", "FAILOVER", g.service)
    s.close()
    return old


def test_the_next_writes_after_a_failover_go_to_the_new_master(
    sentinel_group: SentinelGroup, queue: str
) -> None:
    g = sentinel_group
    app = zsched.App(g.url, queue=queue)
    watch = app.redis.master_watch
    assert watch.subscribed.wait(10)
    # Both paths hold a connection to the current master: the direct one (enqueue) and the
    # client's pool (plain commands).
    app.enqueue("t", run_id="before", delay=3600)
    app.redis.set("k-before", 1)
    old = _graceful_failover(g)
    wait_until(lambda: watch.switches >= 1, 30, "the watch to hear +switch-master")
    new = g.current_master_port()
    assert new != old
    assert _info(old, "replication")["role"] == "master"  # still writable: the risky window

    app.enqueue("t", run_id="after", delay=3600)
    app.redis.set("k-after", 1)

    on_new, on_old = redis.Redis(port=new), redis.Redis(port=old)
    try:
        assert delayed_due(on_new, app.keys, "after") is not None
        assert delayed_due(on_old, app.keys, "after") is None
        assert on_new.get("k-after") == b"1"
        assert on_old.get("k-after") is None
    finally:
        on_new.close()
        on_old.close()
        app.close()
    assert not watch.alive()  # closing the client stopped the watch


def test_the_watch_hears_the_switch_when_a_sentinel_is_down(sentinel_group: SentinelGroup) -> None:
    """One thread per Sentinel: with the first one dead, the others still announce."""
    g = sentinel_group
    client = sync_client(g.url)
    watch = client.master_watch
    assert watch.subscribed.wait(10)
    killer = redis.Redis(port=g.sentinel_ports[0])
    killer.shutdown(nosave=True)
    killer.close()
    old = _graceful_failover(g, g.sentinel_ports[1])
    wait_until(lambda: watch.switches >= 1, 30, "the watch to hear +switch-master")
    new = g.current_master_port()
    assert new != old and _info(old, "replication")["role"] == "master"
    client.set("k", 1)
    on_new, on_old = redis.Redis(port=new), redis.Redis(port=old)
    try:
        assert on_new.get("k") == b"1" and on_old.get("k") is None
    finally:
        on_new.close()
        on_old.close()
        client.close()
