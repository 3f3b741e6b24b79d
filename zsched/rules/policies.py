"""The policies of a recurring rule (pure, no I/O): what to do with missed slots (`Misfire`)
and with a fire while the previous run still runs (`Overlap`). zsched/dispatch/firer.py
applies them; docs/policies.md says what each one means."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from zsched.errors import RuleError


class _Documented(StrEnum):
    """A str Enum whose members are declared as `NAME = value, docstring`."""

    def __new__(cls, value: str, doc: str = "") -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    @classmethod
    def parse(cls, text: str | _Documented) -> Self:
        """The member named by `text` (its value, case-insensitive, `-` read as `_`)."""
        key = str(text).strip().lower().replace("-", "_")
        for member in cls:
            if member.value == key:
                return member
        valid = ", ".join(member.value for member in cls)
        raise RuleError(f"unknown {cls.__name__.lower()} policy {text!r}; valid: {valid}")


class Misfire(_Documented):
    """What to do with slots that passed while the dispatcher was down or behind."""

    CATCH_UP = "catch_up", "Replay every missed slot, oldest first (bounded per dispatch call)."
    COALESCE = "coalesce", "Run once for all the missed slots together."
    SKIP = "skip", "Run none of the missed slots; count them and wait for the next one."


class Overlap(_Documented):
    """What to do when a rule fires while its previous run is still running."""

    ALLOW = "allow", "Start the new run anyway; runs of the rule may overlap."
    SKIP = "skip", "Drop the new fire and count it as an overlap skip."
    QUEUE = "queue", "Hold the new fire until the previous run finishes; at most one waits."
