"""Where policies meet (issue 18): catch-up replays under overlap skip/queue, the overlap
lease of a run waiting for its retry. Each test failed before its fix."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.test_schedules import T0, H, one_outcome_per_slot, setup
from zsched.rules import slot_run_id


@pytest.mark.parametrize("overlap", ["skip", "queue"])
@pytest.mark.parametrize("slow_s", [None, 600])
async def test_catch_up_replays_run_one_after_another_under_overlap(backend, queue, overlap,
                                                                    slow_s) -> None:  # fmt: skip
    """The README's rule: catch_up, max_catch_up=3, overlap=queue (and skip). Every replay
    runs; none is skipped or queued because of another replay."""
    app, clock, drv = setup(backend, queue, slow_s=slow_s)
    app.schedule("r", "report", every=3600, misfire="catch_up", max_catch_up=3, overlap=overlap)
    await drv.step(T0)
    await drv.run_until(T0 + 10 * H + 5, T0 + 10 * H + 50 * 60_000)
    rows = one_outcome_per_slot(app, "r")
    got = Counter((r.outcome, r.reason.split(" ")[0]) for r in rows)
    assert dict(got) == {("ran", ""): 2, ("ran_late", ""): 3, ("skipped", "catch_up_cap"): 6}
    runs = [r for r, *_ in drv.started]
    assert runs == [slot_run_id("r", T0 + i * H) for i in (0, 10, 7, 8, 9)]
    starts = sorted((s, f) for _, s, f in drv.started)
    # Never two runs of the rule at once.
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(starts, starts[1:], strict=False))
    await drv.close()
