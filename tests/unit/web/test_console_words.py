"""The console's pure parts: ledger rows in words, cursors and B-tree keys, credentials."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from zsched.web.auth import Credentials  # noqa: E402
from zsched.web.health import Sampler, Thresholds, causes, verdict  # noqa: E402
from zsched.web.reads import decode_cursor, encode_cursor, tree_key  # noqa: E402
from zsched.web.words import in_zone, iso_utc, why  # noqa: E402


@pytest.mark.parametrize(
    ("outcome", "reason", "run_id", "words"),
    [
        ("skipped", "overlap: nightly@2026-12-01T01:00:00Z still running", "nightly@x",
         "skipped: the previous run nightly@2026-12-01T01:00:00Z was still running (overlap=skip)"),
        ("coalesced", "into nightly@2026-12-02T01:00:00Z", "", "coalesced into nightly@2026-12-02T01:00:00Z"),
        ("skipped", "dst_gap", "r@x", "skipped: the wall time fell in a DST gap (dst_gap=skip)"),
        ("skipped", "paused", "r@x", "skipped: the rule was paused"),
        ("skipped", "paused: deploy of v2 (ana)", "r@x",
         "skipped: the rule was paused (deploy of v2 (ana))"),
        ("skipped", "paused by ana: deploy: v2", "r@x", "skipped: the rule was paused by ana (deploy: v2)"),
        ("skipped", "paused by token", "r@x", "skipped: the rule was paused by token"),
        ("skipped", "paused: by hand", "r@x", "skipped: the rule was paused (by hand)"),
        ("manual", "", "r@manual:2026-12-01T08:00:00Z", "run now by hand as r@manual:2026-12-01T08:00:00Z"),
        ("skipped", "grace_passed", "r@x",
         "skipped: it was later than the rule's misfire grace (misfire policy)"),
        ("ran", "queued behind r@1", "r@2", "queued: waits for r@1 to finish (overlap=queue)"),
        ("ran", "", "r@2", "ran on time as r@2"),
        ("duplicate", "run id already live or done", "r@2",
         "not fired again: run r@2 was already live or recently done"),
        ("weird", "new reason", "", "weird: new reason"),
    ],
)  # fmt: skip
def test_a_ledger_row_reads_as_a_sentence(outcome, reason, run_id, words) -> None:
    assert why(outcome, reason, run_id) == words


def test_cursors_round_trip_and_bad_ones_mean_the_first_page() -> None:
    for due, rid in [(0, "a"), (1_796_000_000_000, "x:y:z"), (5, "é\0<script>")]:
        assert decode_cursor(encode_cursor(due, rid)) == (due, rid)
    assert decode_cursor("") is None and decode_cursor("!!!") is None


def test_tree_keys_order_by_due_then_run_id() -> None:
    runs = [(2, "a"), (1, "b"), (1, "a\0"), (1, "a"), (10, "a")]
    assert sorted(runs, key=lambda x: tree_key(*x)) == [
        (1, "a"),
        (1, "a\0"),
        (1, "b"),
        (2, "a"),
        (10, "a"),
    ]


def test_times_in_utc_and_in_the_rule_zone() -> None:
    ms = 1_796_083_200_000  # 2026-12-01T00:00:00Z
    assert iso_utc(ms) == "2026-12-01T00:00:00Z"
    assert in_zone(ms, "Europe/Berlin") == "2026-12-01 01:00:00 +0100 Europe/Berlin"


def test_credentials_come_in_pairs_and_sessions_are_signed() -> None:
    with pytest.raises(ValueError, match="ZSCHED_WEB_PASSWORD"):
        Credentials.from_env({"ZSCHED_WEB_USER": "ops"})
    assert not Credentials.from_env({}).enabled
    c = Credentials.from_env({"ZSCHED_WEB_TOKEN": "t", "ZSCHED_WEB_SECRET": "s"})
    v = c.session_value(1000, "token")
    assert c.check_session(v, 1001) == "token" and c.check_session(v, 1000 + 13 * 3600) is None
    assert c.check_session(v.replace(".", ".0"), 1001) is None and c.check_session("x", 1) is None
    other = Credentials.from_env({"ZSCHED_WEB_TOKEN": "t2", "ZSCHED_WEB_SECRET": "s"})
    assert other.check_session(v, 1001) is None  # a new token ends every session
    # The session names who logged in, signed: another name under the same MAC is refused.
    ana = c.session_value(1000, "ana <b>")
    assert c.check_session(ana, 1001) == "ana <b>"
    issued, _, rest = ana.partition(".")
    forged = f"{issued}.{c.session_value(1000, 'root').split('.')[1]}.{rest.split('.')[1]}"
    assert c.check_session(forged, 1001) is None
    with pytest.raises(ValueError, match="cannot contain ':'"):
        Credentials.from_env({"ZSCHED_WEB_USER": "a:b", "ZSCHED_WEB_PASSWORD": "p"})


def test_the_verdict_grows_with_backlog_and_dead_letters() -> None:
    s = Sampler()
    for i, (due, dead) in enumerate([(1, 0), (2, 0), (3, 1), (4, 3)]):
        s.add("q", 1000 + i * 2000, {"dead": dead, "acked": 10 * i, "retried": i}, due)
    assert s.rates("q")["acked"] == pytest.approx(30 / (6000 / 60_000))
    assert s.rates("q")["retried"] == pytest.approx(3 / (6000 / 60_000))  # retry.lua counts it
    part = {"oldest_due_age_ms": 0, "backlog_growing": s.backlog_growing("q"), "due": 4,
            "oldest_pending_idle_ms": 0, "new_dead": s.new_dead("q"), "consumers": []}  # fmt: skip
    found = causes(part, Thresholds())
    assert found == [
        "the due backlog is growing (4 runs)",
        "3 new dead letter(s) in the last 5 minutes",
    ]
    assert (
        verdict(found).startswith("needs attention: the due backlog") and verdict([]) == "healthy"
    )
