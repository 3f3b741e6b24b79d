"""The Lua scripts' reply codes: one IntEnum per family, named once (each script's header lists
its codes; docs/protocol.md repeats them for clients in other languages).

An IntEnum compares equal to the integer a script returns, so the decoders pass the reply's
integers on untouched (no conversion per call on the hot paths) and callers compare them with
these members. Where a code becomes something a user sees, the mapping is here too
(`ScheduleResult`); reschedule.lua's and revoke.lua's codes are the public
`RescheduleOutcome` and `CancelOutcome` of zsched/runs/controls.py, whose values are the codes.
"""

from __future__ import annotations

from enum import IntEnum

from zsched.errors import ScriptError


class EnqueueCode(IntEnum):
    """enqueue.lua, backfill.lua and replace.lua: what happened to one run id."""

    #: The id is live (delayed, ready or running): nothing changed.
    DUPLICATE_LIVE = 0
    #: A new run.
    ENQUEUED = 1
    #: The id completed within the dedupe window: nothing changed.
    DUPLICATE_DONE = 2
    #: replace.lua only: the waiting run took the new payload and due time.
    REPLACED = 3


class HoldCode(IntEnum):
    """ack, retry, release, dead, renew and discard: did this worker still hold the entry?"""

    #: Another consumer holds the entry now (it was reclaimed): nothing was written.
    FENCED = 0
    #: Done, by the entry's holder.
    OK = 1
    #: ack, retry, dead and discard: the entry is pending with no consumer, nothing was written.
    #: Written already: by the consumer that reclaimed it (a fence), or by this consumer's own
    #: earlier call whose reply was lost (only the caller knows it sent the call before).
    GONE = 2


class CancelCode(IntEnum):
    """cancel.lua (a delayed run only; revoke.lua cancels anywhere)."""

    #: No delayed run has the id.
    NOT_FOUND = 0
    #: Removed from the delayed set.
    CANCELLED = 1
    #: The run is past the delayed set (ready or running).
    NOT_CANCELLABLE = 2


class ReplayCode(IntEnum):
    """replay.lua: one dead letter put back."""

    #: No dead letter has that entry id.
    NOT_FOUND = 0
    #: Enqueued again, due now.
    REPLAYED = 1
    #: A run with its id is live again: the dead letter stays.
    LIVE = 2


class ScheduleCode(IntEnum):
    """schedule.lua: the upsert of a rule."""

    UNCHANGED = 0
    CREATED = 1
    UPDATED = 2
    #: The compare-and-set failed (a dispatcher wrote the rule in between): read, try again.
    CHANGED = 3


class ScheduleResult(IntEnum):
    """What `App.schedule()` did. An IntEnum: it equals the integer that earlier versions
    returned (0 unchanged, 1 created, 2 updated)."""

    #: The stored rule was the same: nothing written.
    UNCHANGED = 0
    #: A new rule.
    CREATED = 1
    #: An existing rule was edited (its next fire recomputed, its history kept).
    UPDATED = 2

    @classmethod
    def of(cls, code: int) -> ScheduleResult:
        """The result of a schedule.lua reply (CHANGED is retried before it gets here)."""
        try:
            return cls(code)
        except ValueError:
            raise ScriptError(f"schedule: unexpected reply code {code}") from None
