"""Cron fields as croniter 7 must read them to mean what docs/policies.md says (pure).

croniter departs from cron, and from the doc, in two places, both found by the reference
model's own enumerator (tests/model/test_slots_vs_triggers.py):

- an equal range (`5-5`, `6-JUN`, `mon-MON/2`) is the whole field to croniter; to cron it is the one
  value;
- a day field that lists every day (`*/1`, `1-31`) counts as unrestricted to croniter when
  the other day field has a `*` anywhere (`*/2`), so only the other one matches; the doc
  says a field is restricted unless it is `*` or `?`, and a day matching either fires: every
  day does.
"""

from __future__ import annotations

import re

from croniter import croniter

_RANGE = re.compile(r"(\w+)-(\w+)(?:/\d+)?")
_ANY = ("*", "?")
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_DAYS = "sun mon tue wed thu fri sat".split()


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


def _one_value(part: str, names: list[str], first: int) -> str:
    """An equal range (`5-5`, `6-JUN/2`) as its one value; any other part as it is."""
    m = _RANGE.fullmatch(part)

    def value(text: str) -> int | None:
        low = text.lower()
        return names.index(low) + first if low in names else int(low) if low.isdigit() else None

    if m and value(m[1]) is not None and value(m[1]) == value(m[2]):
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
