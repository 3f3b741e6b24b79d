"""The README's own rule (issue 18, D2), run as written through an outage of several nights
on a FakeClock, with a real dispatcher and a real worker: what README.md and
docs/policies.md say it does ("Misfire policies", "Where misfire and overlap meet")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import zsched
from zsched import FakeClock
from zsched.clock import datetime_to_ms


def _ms(iso: str) -> int:
    return datetime_to_ms(datetime.fromisoformat(iso).replace(tzinfo=UTC))


def _rid(day: int) -> str:  # 02:00 in Berlin in late November (CET) is 01:00Z
    return f"nightly-report@2026-11-{day:02d}T01:00:00Z"


async def test_the_readme_nightly_report_through_an_outage(real: Any, queue: str) -> None:
    """Up on the 25th, down from then until the 30th's slot is just due: 26-29 missed. The
    30th fires on time first; then the three newest missed slots (27, 28, 29) replay, oldest
    first, one after another (overlap="queue": never two runs of the rule live), each
    `ran_late` under its own slot's run id; the 26th, beyond max_catch_up=3, is recorded
    `skipped: catch_up_cap`. No replay is dropped or queued behind another replay."""
    clock = FakeClock(_ms("2026-11-24T12:00:00"))
    app = real.app(queue, clock=clock)
    ran: list[tuple[str, int]] = []

    @app.task(name="build_instructor_report")
    def build_instructor_report(payload: Any) -> None:
        info = zsched.current_run()
        ran.append((info.run_id, datetime_to_ms(info.scheduled_for)))

    # As in README.md, "Recurring rules":
    app.schedule("nightly-report", "build_instructor_report", cron="0 2 * * *", tz="Europe/Berlin",
                 misfire="catch_up", max_catch_up=3, overlap="queue")  # fmt: skip
    d = app.dispatcher(redis=real.async_client())
    w = app.worker(redis=real.async_client())
    clock.set(_ms("2026-11-25T01:00:00"))
    await d.tick()
    assert await w.tick() == 1
    clock.set(_ms("2026-11-30T01:00:00.005"))  # the dispatchers come back
    live_most = 0
    for _ in range(12):  # passes a second apart (past the catch-up's short pause)
        await d.tick()
        live = [m for m in real.sync.hkeys(app.keys.runs) if m.startswith(b"nightly-report@")]
        live_most = max(live_most, len(live))
        await w.tick()
        clock.advance(1000)
    await d.close()
    await w.close()
    assert [rid for rid, _ in ran] == [_rid(25), _rid(30), _rid(27), _rid(28), _rid(29)]
    assert all(scheduled == _ms(rid.split("@")[1][:-1]) for rid, scheduled in ran)
    assert live_most == 1  # one after another
    got = {h["run_id"]: (h["outcome"], h["reason"]) for h in app.schedule_history("nightly-report")}
    assert got == {
        _rid(25): ("ran", ""),
        _rid(26): ("skipped", "catch_up_cap"),
        _rid(27): ("ran_late", ""),
        _rid(28): ("ran_late", ""),
        _rid(29): ("ran_late", ""),
        _rid(30): ("ran", ""),
    }
