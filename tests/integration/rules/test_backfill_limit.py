"""docs/policies.md, "A backfill": one backfill covers at most 10,000 slots; a longer range
is refused whole, with a RuleError that says so and where the 10,000th slot falls (it was
cut silently to the oldest 10,000, the count returned the only hint)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.rules.test_schedules import T0
from tests.state import delayed_count
from zsched import FakeClock
from zsched.cli.main import main
from zsched.errors import RuleError
from zsched.rules.ops import MAX_BACKFILL_SLOTS

S = 1000


def _runs(real: Any, app: Any) -> int:
    return delayed_count(real.sync, app.keys) + int(real.sync.xlen(app.keys.ready))


def test_a_backfill_of_more_than_10000_slots_is_refused_whole(real: Any, queue: str,
                                                              capsys: Any) -> None:  # fmt: skip
    assert MAX_BACKFILL_SLOTS == 10_000
    app = real.app(queue, clock=FakeClock(T0 + 86_400 * S))
    app.schedule("hb", "t", every=1)
    lo = T0 / S
    with pytest.raises(RuleError) as err:
        app.backfill("hb", lo, lo + 10_000)  # 10,001 slots, both ends included
    assert str(err.value) == ("backfill of hb: the range holds more than 10,000 slots (the "
                              "10,000th is at 2027-01-15T10:46:39+00:00); backfill it in parts "
                              "of at most 10,000")  # fmt: skip
    assert _runs(real, app) == 0 and app.schedule_history("hb") == []
    argv = ["schedules", "backfill", "hb", "--from", "2027-01-15T08:00:00Z",
            "--to", "2027-01-15T10:46:40Z", "--redis", real.url, "--queue", queue]  # fmt: skip
    assert main(argv) == 2
    assert "more than 10,000 slots" in capsys.readouterr().err
    assert _runs(real, app) == 0
    assert app.backfill("hb", lo, lo + 9_999) == 10_000  # the limit itself is allowed
    assert _runs(real, app) == 10_000
