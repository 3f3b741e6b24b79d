"""The B-tree index prototype (bench/btree.py) on a real Redis Cluster: its leaf keys are made
inside the scripts, not passed in KEYS, which a key-layout version 3 would rely on
(BENCHMARKS.md, "Targets missed"). Redis 7.0 runs them because they share the queue's tag."""

from __future__ import annotations

from typing import Any

import pytest
import redis.exceptions as rex
from cluster_harness import Cluster
from redis.crc import key_slot

from bench import btree


def test_leaves_in_the_tag_run_on_the_cluster(rc: Any) -> None:
    tag = "{bt-ok}"
    keys = [f"{tag}:index", f"{tag}:leaves", f"{tag}:leaf:"]
    enq, disp = rc.register_script(btree.BTREE_ENQUEUE), rc.register_script(btree.BTREE_DISPATCH)
    try:
        runs = [(f"r{i:05d}", 1000 + i % 7) for i in range(600)]
        enq(keys=keys, args=[x for rid, due in runs for x in (rid, due)])
        leaves = rc.zcard(f"{tag}:index")
        assert leaves >= 600 // 128  # the runs were split over leaves made inside the script
        assert disp(keys=[f"{tag}:index", f"{tag}:leaf:"], args=[1003, 1000]) == sum(
            1 for _, due in runs if due <= 1003
        )
    finally:
        for n in range(1, int(rc.get(f"{tag}:leaves") or 0) + 1):
            rc.delete(f"{tag}:leaf:{n}")
        rc.delete(f"{tag}:index", f"{tag}:leaves")


def test_what_redis_checks_of_keys_made_inside_a_script(rc: Any, cluster: Cluster) -> None:
    """The check above could fail: a key made inside a script on another node's slot is
    refused. Redis 7.0 does not refuse one in another slot of the same node, though (it would
    break when that slot moves): the shared tag is all that keeps leaves with their queue."""
    declared = "{bt-a}:k"
    here = cluster.owner_of(declared).port
    tags = (f"{{bt-{i}}}:k" for i in range(1000))
    elsewhere = next(k for k in tags if cluster.owner_of(k).port != here)
    same_node = next(k for k in tags if cluster.owner_of(k).port == here
                     and key_slot(k.encode()) != key_slot(declared.encode()))  # fmt: skip
    script = rc.register_script("redis.call('GET', KEYS[1]); return redis.call('SET', ARGV[1], 1)")
    try:
        with pytest.raises(rex.ResponseError, match="non local key"):
            script(keys=[declared], args=[elsewhere])
        script(keys=[declared], args=[same_node])  # runs: nothing checks the slot
        assert rc.exists(same_node) == 1
    finally:
        rc.delete(same_node)
