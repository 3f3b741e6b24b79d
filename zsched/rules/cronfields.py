"""Cron fields as croniter 7 must read them to mean what docs/policies.md says (pure).

croniter departs from cron, and from the doc, in two places, both found by the reference
model's own enumerator (tests/model/test_slots_vs_triggers.py):

- an equal range (`5-5`, `6-JUN`, `mon-MON/2`) is the whole field to croniter; to cron it is the one
  value;
- a day field that lists every day (`*/1`, `1-31`) counts as unrestricted to croniter when
  the other day field has a `*` anywhere (`*/2`), so only the other one matches; the doc
  says a field is restricted unless it is `*` or `?`, and a day matching either fires: every
  day does.

And croniter accepts syntax the doc does not have (`L` but alone in a day-of-month list, `W`,
`#`, a range that runs backwards, H and R): `refused` names it, so that a rule is only what
the doc, and the model written from it, say. `split` turns an expression into its fields
(aliases spelled out) and applies `refused`.
"""

from __future__ import annotations

import re

from croniter import croniter

from zsched.errors import RuleError

# croniter's H (hashed) and R (random) pick values per process: replicas would disagree.
_HASH_OR_RANDOM = re.compile(r"\b[hr]\b", re.IGNORECASE)
_LAST = re.compile(r"\d*l\d*|lw")  # L-2, 5L, L5: croniter's "last" day or weekday
_WEEKDAY = re.compile(r"\d*w")  # 15W: croniter's nearest weekday
#: The fields' names; a 5-field expression's are the last 5.
NAMED = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}  # fmt: skip
_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_RANGE = re.compile(r"(\w+)-(\w+)(?:/\d+)?")
_ANY = ("*", "?")
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_DAYS = "sun mon tue wed thu fri sat".split()


def split(expr: object, *, stored: bool = False) -> tuple[str, ...]:
    """The fields of a cron expression (an alias spelled out), checked against the syntax
    table; `stored`: read back (see `refused`). A RuleError names what is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise RuleError(f"a cron expression must be a non-empty string, got {expr!r}")
    text = expr.strip()
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            raise RuleError(f"unknown cron alias {text!r}; valid: {', '.join(ALIASES)}")
        text = alias
    fields = tuple(text.split())
    if len(fields) not in (5, 6):
        raise RuleError(
            f"cron {expr!r} has {len(fields)} fields; expected 5 (minute hour day-of-month "
            "month day-of-week) or 6 (second first); a year field is not supported"
        )
    why = refused(fields, stored=stored)
    if why:
        raise RuleError(f'cron {expr!r}: {why} (docs/policies.md, "Fields")')
    return fields


def for_croniter(fields: tuple[str, ...]) -> tuple[str, ...]:
    """`fields` (5, or 6 with the seconds first) rewritten to the same meaning for croniter."""
    dom, month, dow = len(fields) - 3, len(fields) - 2, len(fields) - 1
    names = {month: (_MONTHS, 1), dow: (_DAYS, 0)}
    out = [",".join(_one_value(p, *names.get(i, ([], 0))) for p in f.split(","))
           for i, f in enumerate(fields)]  # fmt: skip
    if (
        out[dom] not in _ANY
        and out[dow] not in _ANY
        and (_every_day(out, dom) or _every_day(out, dow))
    ):
        # Either field matches any day, so every day fires (in the months the rule names).
        out[dom], out[dow] = "*", "*"
    return tuple(out)


def refused(fields: tuple[str, ...], *, stored: bool = False) -> str | None:
    """Why `fields` (5, or 6 with the seconds first) use croniter syntax beyond the table of
    docs/policies.md ("Fields"), naming the field and the construct; None if they do not.
    Refused rather than passed on: the reference model checks only what the doc says.
    `stored`: a rule read back, perhaps written before the table; only H and R are refused
    (as they always were), so that a stored rule fires as it did."""
    offset = 6 - len(fields)
    for index, value in enumerate(fields):
        name = NAMED[index + offset]
        if stored and not _HASH_OR_RANDOM.search(value):
            continue
        why = _refused_field(value.lower(), index + offset)
        if why:
            return f"{name} field {value!r}: {why}"
    return None


def _refused_field(value: str, index: int) -> str | None:
    names = {4: (_MONTHS, 1), 5: (_DAYS, 0)}.get(index, ([], 0))
    if _HASH_OR_RANDOM.search(value):
        return "H (hashed) and R (random) are not supported: replicas would pick other values"
    if "#" in value:
        return "'#' (the nth weekday of the month) is not supported"
    # L and W are day syntax; croniter refuses them in other fields ("bad ... field"). `L`
    # alone in the day-of-month list is the month's last day (docs/policies.md).
    day = index in (3, 5)
    parts = [p for p in value.split(",") if not (index == 3 and p == "l")]
    tokens = [t for p in parts for t in re.split(r"[/-]", p) if day and t not in names[0]]
    if any(_LAST.fullmatch(t) for t in tokens) and index == 3:
        return "'L' (the month's last day) stands alone in the list: `L` or `1,L`"
    if any(_LAST.fullmatch(t) for t in tokens):
        return "'L' (the last weekday of the month) is not supported"
    if any(_WEEKDAY.fullmatch(t) for t in tokens):
        return "'W' (the nearest weekday) is not supported"
    for part in value.split(","):
        rng, slash, _ = part.partition("/")
        a, sep, b = rng.partition("-")
        low, high = _value(a, *names), _value(b, *names)
        if sep and low is not None and high is not None and low > high:
            why = f"the range {a}-{b} runs backwards (croniter wraps it around; cron does not)"
            if slash:
                return why + ": write it as a list"
            first, last = _BOUNDS[index]
            head = "" if index == 5 and low == 7 else f"{a}-{6 if index == 5 else last},"
            return why + f": write {head}{first}-{b}"
    return None


def _value(text: str, names: list[str], first: int) -> int | None:
    if text in names:
        return names.index(text) + first
    # ASCII only: str.isdigit() takes '²', which int() refuses, and '٣', which croniter does.
    return int(text) if text.isascii() and text.isdigit() else None


def _one_value(part: str, names: list[str], first: int) -> str:
    """An equal range (`5-5`, `6-JUN/2`) as its one value; any other part as it is."""
    m = _RANGE.fullmatch(part)
    if m and _value(m[1].lower(), names, first) is not None:
        if _value(m[1].lower(), names, first) == _value(m[2].lower(), names, first):
            return m[1]
    return part


def _every_day(fields: list[str], index: int) -> bool:
    probe = ["*"] * len(fields)
    probe[index] = fields[index]
    try:
        expanded, _ = croniter.expand(" ".join(probe), second_at_beginning=len(fields) == 6)
    except (ValueError, TypeError, KeyError, IndexError):
        return False  # a bad field: _matcher names it
    return bool(expanded[index - (len(fields) - 5)] == ["*"])
