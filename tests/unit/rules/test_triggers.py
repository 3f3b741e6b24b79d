"""Rules without DST: validation, cron syntax, intervals, round trips, policies, run ids."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zsched.errors import RuleError
from zsched.rules.triggers import (
    Cron,
    Every,
    Misfire,
    Overlap,
    Trigger,
    slot_run_id,
    trigger_from_dict,
)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def fires(rule: Trigger, start: datetime, count: int) -> list[datetime]:
    out, current = [], start
    for _ in range(count):
        current = rule.next_after(current)
        out.append(current)
    return out


# --- validation --------------------------------------------------------------------------


def test_cron_without_a_zone_is_refused_and_the_error_says_a_zone_is_required() -> None:
    with pytest.raises(RuleError, match=r"needs a time zone.*'UTC'"):
        Cron("0 0 * * *")


def test_unknown_zone_is_named_in_the_error() -> None:
    with pytest.raises(RuleError, match="unknown time zone 'Mars/Olympus'"):
        Cron("0 0 * * *", "Mars/Olympus")


@pytest.mark.parametrize(
    ("expr", "named"),
    [
        ("61 * * * *", "minute field '61'"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 32 * *", "day-of-month field '32'"),
        ("* * 0 * *", "day-of-month field '0'"),
        ("* * * 13 *", "month field '13'"),
        ("* * * * 8", "day-of-week field '8'"),
        ("*/0 * * * *", "minute field '\\*/0'"),
        ("* * * foo *", "month field 'foo'"),
        ("60 * * * * *", "second field '60'"),
        ("0 60 * * * *", "minute field '60'"),
        ("* * * *", "4 fields; expected 5"),
        ("* * * * * * *", "7 fields; expected 5"),
        ("@reboot", "unknown cron alias '@reboot'"),
        ("H * * * *", "minute field 'H'"),
        ("0 R * * *", "hour field 'R'"),
        ("", "non-empty string"),
    ],
)
def test_invalid_expression_error_names_the_bad_part(expr: str, named: str) -> None:
    with pytest.raises(RuleError, match=named):
        Cron(expr, "UTC")


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"])
def test_expression_that_never_fires_is_refused(expr: str) -> None:
    # croniter.is_valid accepts these; only computing a first fire shows they are empty.
    with pytest.raises(RuleError, match="never fires.*day-of-month"):
        Cron(expr, "UTC")


@pytest.mark.parametrize(("option", "value"), [("dst_gap", "later"), ("dst_repeat", "twice")])
def test_unknown_dst_policy_is_refused_listing_the_valid_ones(option: str, value: str) -> None:
    with pytest.raises(RuleError, match=f"{option} must be one of"):
        Cron("0 0 * * *", "UTC", **{option: value})


CRON_TOKENS = [
    "*",
    "*/5",
    "*/0",
    "0",
    "7",
    "31",
    "60",
    "1-5",
    "5-1",
    "1-5/2",
    "1,2",
    "L",
    "15W",
    "1#2",
    "1#6",
    "L5",
    "5L",
    "?",
    "mon",
    "jan-mar",
    "fri-mon",
    "-1",
    "/",
    "#",
    "x",
    "²",
    "٣",
    "22-2",
    "L,1",
]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.lists(st.sampled_from(CRON_TOKENS), min_size=4, max_size=7).map(" ".join),
        st.text(alphabet="0123456789*/,-?#LW HR@", max_size=24),
    )
)
def test_any_text_either_builds_a_rule_that_fires_or_raises_rule_error(expr: str) -> None:
    try:
        rule = Cron(expr, "UTC")
    except RuleError:
        return
    assert rule.next_after_ms(0) > 0


# --- cron syntax ---------------------------------------------------------------------------


def test_six_fields_read_the_seconds_first() -> None:
    assert fires(Cron("30 * * * * *", "UTC"), at(2026, 1, 1), 2) == [
        at(2026, 1, 1, 0, 0, 30),
        at(2026, 1, 1, 0, 1, 30),
    ]
    # With seconds last (croniter's default) this would fire every second.
    assert fires(Cron("0 */5 * * * *", "UTC"), at(2026, 1, 1), 2) == [
        at(2026, 1, 1, 0, 5),
        at(2026, 1, 1, 0, 10),
    ]


@pytest.mark.parametrize(
    ("alias", "same_as"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ],
)
def test_aliases_fire_like_their_five_field_form(alias: str, same_as: str) -> None:
    rule, plain = Cron(alias, "Europe/Berlin"), Cron(same_as, "Europe/Berlin")
    assert fires(rule, at(2026, 3, 1), 5) == fires(plain, at(2026, 3, 1), 5)
    assert rule.fixed_time == plain.fixed_time == (alias != "@hourly")


def test_feb_29_rule_waits_for_the_next_leap_year() -> None:
    rule = Cron("0 0 29 2 *", "UTC")
    assert rule.next_after(at(2027, 1, 1)) == at(2028, 2, 29)
    assert rule.next_after(at(2028, 2, 29)) == at(2032, 2, 29)


def test_rules_cross_the_end_of_the_year() -> None:
    assert Cron("59 23 31 12 *", "UTC").next_after(at(2026, 12, 31, 23, 59)) == at(
        2027, 12, 31, 23, 59
    )
    assert fires(Cron("*/30 * * * *", "UTC"), at(2026, 12, 31, 23, 15), 2) == [
        at(2026, 12, 31, 23, 30),
        at(2027, 1, 1),
    ]
    # New Year in Auckland (NZDT, +13) is still the previous day in UTC.
    assert Cron("@yearly", "Pacific/Auckland").next_after(at(2026, 6, 1)) == at(2026, 12, 31, 11)


def test_day_of_month_or_day_of_week_either_may_match_when_both_are_restricted() -> None:
    # January 2026: the 13th is a Tuesday; Fridays are the 2nd, 9th, 16th, 23rd and 30th.
    days = [d.day for d in fires(Cron("0 0 13 * 5", "UTC"), at(2026, 1, 1), 6)]
    assert days == [2, 9, 13, 16, 23, 30]
    assert [d.day for d in fires(Cron("0 0 13 * *", "UTC"), at(2026, 1, 1), 2)] == [13, 13]
    assert [d.day for d in fires(Cron("0 0 * * 5", "UTC"), at(2026, 1, 1), 2)] == [2, 9]


def test_a_stepped_day_field_counts_as_restricted_for_the_or_rule() -> None:
    # Unlike cronie, which would AND a day field starting with "*": odd days or Fridays.
    days = [d.day for d in fires(Cron("0 0 */2 * 5", "UTC"), at(2026, 1, 1), 5)]
    assert days == [2, 3, 5, 7, 9]


def test_fixed_time_means_neither_minute_nor_hour_starts_with_a_star() -> None:
    fixed = ["30 2 * * *", "0 9 * * 1-5", "0 9,17 * * *", "0 0-23/2 * * *", "0 30 2 * * *"]
    wildcard = ["*/15 * * * *", "0 */2 * * *", "0 * * * *", "* 2 * * *", "0 * * * * *"]
    assert all(Cron(expr, "UTC").fixed_time for expr in fixed)
    assert not any(Cron(expr, "UTC").fixed_time for expr in wildcard)
    assert (Cron("30 2 * * *", "UTC").dst_gap, Cron("30 2 * * *", "UTC").dst_repeat) == (
        "shift",
        "first",
    )
    assert (Cron("0 * * * *", "UTC").dst_gap, Cron("0 * * * *", "UTC").dst_repeat) == (
        "skip",
        "both",
    )


# --- next_after and slots ----------------------------------------------------------------------


def test_next_after_is_strictly_after_and_returns_aware_utc() -> None:
    rule = Cron("0 * * * *", "UTC")
    assert rule.next_after(at(2026, 1, 1, 5)) == at(2026, 1, 1, 6)
    assert rule.next_after(at(2026, 1, 1, 5) - timedelta(microseconds=1)) == at(2026, 1, 1, 5)
    berlin = datetime(2026, 1, 1, 6, tzinfo=timezone(timedelta(hours=1)))
    result = rule.next_after(berlin)
    assert result == at(2026, 1, 1, 6) and result.tzinfo is UTC


@pytest.mark.parametrize("rule", [Cron("0 * * * *", "UTC"), Every(60)])
def test_next_after_refuses_a_naive_datetime(rule: Trigger) -> None:
    with pytest.raises(ValueError, match="aware datetime"):
        rule.next_after(datetime(2026, 1, 1))


@pytest.mark.parametrize("rule", [Cron("*/10 * * * *", "UTC"), Every(600)])
def test_slots_between_is_open_at_the_start_closed_at_the_end_and_limited(rule: Trigger) -> None:
    start, end = ms(at(2026, 1, 1)), ms(at(2026, 1, 1, 1))
    slots = rule.slots_between(start, end, 100)
    assert slots == [start + k * 600_000 for k in range(1, 7)]
    assert rule.slots_between(start, end, 2) == slots[:2]
    assert rule.slots_between(start, end, 0) == []
    assert rule.slots_between(end, start, 10) == []


# --- Every ----------------------------------------------------------------------------------


def test_every_accepts_seconds_a_timedelta_or_unit_keywords() -> None:
    same = [Every(600), Every(seconds=600), Every(timedelta(minutes=10)), Every(minutes=10)]
    assert all(rule == same[0] for rule in same)
    assert same[0].interval_ms == 600_000


def test_every_defaults_to_slots_aligned_to_multiples_of_the_interval() -> None:
    assert Every(minutes=10).next_after(at(2026, 1, 1, 0, 7, 30)) == at(2026, 1, 1, 0, 10)


def test_every_is_anchored_at_start_at_and_first_fires_there() -> None:
    rule = Every(minutes=10, start_at=at(2026, 1, 1, 0, 3))
    assert rule.next_after(at(2025, 6, 1)) == at(2026, 1, 1, 0, 3)
    assert fires(rule, at(2026, 1, 1, 0, 5), 2) == [at(2026, 1, 1, 0, 13), at(2026, 1, 1, 0, 23)]
    # Epoch seconds, as in app.schedule and enqueue (issue 18: it was ms here).
    assert Every(60, start_at=ms(at(2026, 1, 1, 0, 3)) / 1000) == Every(
        60, start_at=at(2026, 1, 1, 0, 3)
    )


def test_every_counts_absolute_time_across_dst() -> None:
    rule = Every(hours=1)
    spring_night = [d.astimezone(UTC) for d in fires(rule, at(2026, 3, 29, 0), 3)]
    assert spring_night == [at(2026, 3, 29, 1), at(2026, 3, 29, 2), at(2026, 3, 29, 3)]


def test_every_rounds_the_interval_to_whole_milliseconds() -> None:
    assert Every(0.0015).interval_ms == 2
    assert Every(1.0004).interval_ms == 1000
    assert Every(timedelta(microseconds=2_499)).interval_ms == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0,), {}, "at least 1 ms"),
        ((-5,), {}, "at least 1 ms"),
        ((0.0004,), {}, "at least 1 ms"),
        ((float("nan"),), {}, "finite number"),
        ((float("inf"),), {}, "finite number"),
        ((True,), {}, "finite number"),
        (("60",), {}, "finite number"),
        ((), {}, "needs an interval"),
        ((), {"fortnights": 1}, "unknown unit 'fortnights'"),
        ((60,), {"start_at": datetime(2026, 1, 1)}, "start_at must be an aware datetime"),
        ((60,), {"start_at": "soon"}, "start_at must be"),
        ((60,), {"start_at": float("nan")}, "start_at must be finite"),
    ],
)
def test_every_refuses_bad_intervals(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(RuleError, match=message):
        Every(*args, **kwargs)  # type: ignore[arg-type]


# --- round trips, identity, descriptions ------------------------------------------------------


ROUND_TRIP = [
    Cron("30 2 * * *", "Europe/Berlin"),
    Cron("*/15 * * * *", "America/New_York", dst_gap="shift", dst_repeat="first"),
    Cron("0 30 2 * * *", "UTC"),
    Cron("@daily", "Australia/Lord_Howe"),
    Every(600),
    Every(timedelta(milliseconds=1500), start_at=at(2026, 3, 29, 1)),
]


@pytest.mark.parametrize("rule", ROUND_TRIP, ids=lambda r: r.describe())
def test_to_dict_round_trips_through_msgpack(rule: Cron | Every) -> None:
    data = rule.to_dict()
    assert all(isinstance(v, str | int | None) and not isinstance(v, bool) for v in data.values())
    back = trigger_from_dict(msgpack.unpackb(msgpack.packb(data)))
    assert back == rule and type(back) is type(rule)
    assert back.next_after_ms(ms(at(2026, 3, 28))) == rule.next_after_ms(ms(at(2026, 3, 28)))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"v": 1, "kind": "sometimes"}, "unknown trigger kind 'sometimes'"),
        ({"v": 2, "kind": "cron"}, "unknown trigger dict version 2"),
        ({"v": 1, "kind": "cron", "expr": "0 0 * * *"}, "lacks 'tz'"),
        ({"v": 1, "kind": "every", "interval_ms": "5", "start_ms": 0}, "must be integers"),
        (
            {
                "v": 1,
                "kind": "cron",
                "expr": "0 0 * * *",
                "tz": "Nowhere/Land",
                "dst_gap": "shift",
                "dst_repeat": "first",
            },
            "unknown time zone",
        ),
        ("cron", "must be a dict"),
    ],
)
def test_trigger_from_dict_refuses_bad_data(data: object, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        trigger_from_dict(data)


def test_rules_are_frozen_and_hashable() -> None:
    rule = Cron("0 0 * * *", "UTC")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.expr = "1 1 * * *"  # type: ignore[misc]
    assert len({rule, Cron("0 0 * * *", "UTC", dst_gap="shift"), Every(5), Every(5)}) == 2


def test_describe_reads_as_text() -> None:
    assert Cron("30 2 * * *", "Europe/Berlin").describe() == "cron '30 2 * * *' in Europe/Berlin"
    assert (
        Cron("30 2 * * *", "Europe/Berlin", dst_gap="skip").describe()
        == "cron '30 2 * * *' in Europe/Berlin (DST gap skip, repeat first)"
    )
    assert Every(minutes=90).describe() == "every 1h30m"
    assert (
        Every(1.5, start_at=at(2026, 3, 29, 1)).describe() == "every 1.5s from 2026-03-29T01:00:00Z"
    )


# --- policies and run ids ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", [Misfire, Overlap])
def test_policy_enums_parse_their_values_and_document_every_member(policy: type[Misfire]) -> None:
    for member in policy:
        assert policy.parse(member.value.upper().replace("_", "-")) is member
        assert member.__doc__ and member.__doc__ != policy.__doc__
        assert isinstance(member, str) and member == member.value
    with pytest.raises(RuleError, match="unknown .* policy 'later'; valid: "):
        policy.parse("later")


def test_misfire_and_overlap_have_the_designed_values() -> None:
    assert [m.value for m in Misfire] == ["catch_up", "coalesce", "skip"]
    assert [o.value for o in Overlap] == ["allow", "skip", "queue"]


def test_slot_run_id_is_schedule_at_utc_iso_with_milliseconds_only_when_present() -> None:
    assert slot_run_id("nightly", ms(at(2026, 3, 29, 1))) == "nightly@2026-03-29T01:00:00Z"
    assert slot_run_id("fast", ms(at(2026, 3, 29, 1)) + 500) == "fast@2026-03-29T01:00:00.500Z"


def test_the_names_before_the_glossary_still_import_as_aliases() -> None:
    # "rule" is the stored spec, a trigger is Cron | Every: the old names keep users' code.
    from zsched.rules import triggers

    assert triggers.Rule is triggers.Trigger
    assert triggers.rule_from_dict is triggers.trigger_from_dict
    assert triggers.RuleDict is triggers.TriggerDict
    assert isinstance(triggers.Every(60), triggers.Trigger)
