"""QueueContext: what the layers below the App receive (no Redis: nothing here connects)."""

from __future__ import annotations

import dataclasses

import pytest

import zsched
from zsched import FakeClock
from zsched.context import QueueContext
from zsched.store.partitions import partition_for

URL = "redis://127.0.0.1:1/0"  # never reached: building an App and its views sends nothing


def test_an_app_reads_its_public_attributes_from_its_frozen_context() -> None:
    app = zsched.App(URL, queue="q", durable="fsync", durable_timeout=2.5)
    ctx = app.ctx
    assert (app.queue, app.keys, app.redis, app.url) == (ctx.queue, ctx.keys, ctx.redis, URL)
    assert app.durable and ctx.durability == "fsync" and ctx.durable_timeout_ms == 2500
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.queue = "other"  # type: ignore[misc]


def test_setting_an_app_attribute_gives_the_app_a_new_context_sharing_the_rest() -> None:
    app = zsched.App(URL, queue="q")
    before = app.ctx
    clock = FakeClock(1_000)
    app.clock = clock
    assert app.ctx is not before and app.ctx.clock is clock and before.clock is not clock
    assert app.ctx.tasks is before.tasks and app.ctx.shared is before.shared
    assert app.ctx.local_ms() == 1_000  # a pinned clock: no Redis TIME


def test_partition_views_are_replaced_contexts_sharing_registries_and_state() -> None:
    app = zsched.App(URL, queue="q", partitions=3)
    views = app.partition_views()
    assert app.partition_views() is views  # made once
    assert [v.partition for v in views] == [0, 1, 2]
    assert [(v.keys.queue, v.keys.partition) for v in views] == [("q", 0), ("q", 1), ("q", 2)]
    for v in views:
        assert isinstance(v.ctx, QueueContext) and v.ctx.shared is app.ctx.shared
        assert v.ctx.tasks is app.ctx.tasks and v.ctx.declared is app.ctx.declared
    assert len({id(v.ctx.scripts) for v in views}) == 3  # each view has its own direct path
    with pytest.raises(ValueError, match="is a view already"):
        views[0].partition_views()


def test_a_view_sees_only_the_declared_rules_of_its_partition_even_those_declared_later() -> None:
    app = zsched.App(URL, queue="q", partitions=4)
    views = app.partition_views()
    for i in range(12):
        app.declare(f"rule-{i}", "t", every=60)
    for v in views:
        assert set(v.declared) == {s for s in app.declared if partition_for(s, 4) == v.partition}
    assert app.rule_home("rule-7") is views[partition_for("rule-7", 4)]
    assert app.ctx.rule_home("rule-7") is views[partition_for("rule-7", 4)].ctx
