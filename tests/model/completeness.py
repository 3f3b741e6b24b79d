"""The ledger's completeness, from the rule's operations and the slot enumerator alone.

The issue's first ledger invariant, "every slot that is due has exactly one outcome", checked
without the model's own scheduling state (its next slot, pause start, catch-up passes) and
without the product's audit: a hole both share (the model listing 1,000 slots of an outage
and dropping the rest) is caught here. `DueSlots` hears each operation as the harness makes
it (create, edits of the trigger, pause, resume, remove, dispatchers down/up) and keeps, as
docs/policies.md states them:

- the trigger history as spans: each trigger's slots `lo < s <= hi` are the rule's
  (tests/model/slots.py enumerates them; jitter moves a fire, not its slot);
- the stored next fire (`cursor`): while a dispatcher is up every slot up to now is handled,
  so it is the first slot after now; while all are down it stays;
- an edit of the trigger: the slots after it are the new trigger's; but "a slot that is already
  due fires under the new definition": a stored next fire already past (an edit during an
  outage) stays, the old trigger's span ends at it and the new one's starts after it;
- a pause: from the stored next fire (so slots missed in an outage before it are paused too)
  to the resume, each slot `skipped: paused` (a range entry is its slots); an edit of a
  paused rule's trigger records the old trigger's so far and the new one's from the edit on;
- a removal: no ledger at all.

`problems()` then lists what is wrong with a ledger (the model's: the real one is compared
with it at every step): a slot handled (below the stored next fire, or up to now while a
dispatcher is up and caught up) without exactly one outcome (one waiting in the catch-up
backlog has none yet), a paused slot with another outcome, an outcome for an instant that is
no slot, a `skipped: dst_gap` for an instant no gap dropped or one missing for a gap a later
fire has passed. Backfilled records and manual fires are not a slot's outcome.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.model import slots as calendar

#: Slots listed at once (a long pause of a short-period rule is ~1,500).
LIMIT = 10**7


@dataclass
class Span:
    """`trigger`'s slots in (lo, hi] are the rule's (hi None: still in force); dst gaps are
    judged from `gaps_from` (the edit: "after an edit of the trigger, only gaps from the edit
    on"), which is past `lo` when the span starts at a slot already due."""

    trigger: Any
    lo: int
    hi: int | None = None
    gaps_from: int = 0


@dataclass
class DueSlots:
    trigger: Any
    now: int
    paused: bool = False
    up: bool = True
    removed: bool = False
    spans: list[Span] = field(default_factory=list)
    #: The stored next fire (None while paused).
    cursor: int | None = None
    #: Paused since (the first paused slot), while paused.
    paused_from: int | None = None
    #: (trigger, first, last): each of its slots in [first, last] is `skipped: paused`.
    pauses: list[tuple[Any, int, int]] = field(default_factory=list)
    #: Kept slots of an old trigger (an edit during an outage) that a pause skipped.
    kept_paused: set[int] = field(default_factory=set)
    _listed: dict[tuple[Any, int], tuple[list[int], int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spans = [Span(self.trigger, self.now - 1, gaps_from=self.now - 1)]
        if self.paused:
            self.paused_from = self.now
        else:
            self.cursor = calendar.first_after(self.trigger, self.now - 1)

    # -- operations (each at `t`, after the system settled there) -------------------------------

    def _pass(self, t: int) -> None:
        """A dispatcher up at `t` has handled every slot up to it."""
        self.now = t
        if self.up and not self.paused and not self.removed:
            self.cursor = calendar.first_after(self.trigger, t)

    def on(self, op: str, t: int, *args: Any) -> None:
        """An operation of the harness (Pair.do): those that change which slots are due."""
        self._pass(t)
        if op == "set_up":
            self.up = bool(args[0])
            self._pass(t)
        elif op == "pause" and not self.paused:
            self.paused, self.paused_from = True, self.cursor if self.cursor is not None else t
            k = self.cursor
            if k is not None and k <= t and calendar.first_after(self.trigger, k - 1) != k:
                # The old trigger's due slot an edit kept: `skipped: paused` at the pause.
                self.kept_paused.add(k)
                self.paused_from = k + 1
            self.cursor = None
        elif op == "resume" and self.paused:
            assert self.paused_from is not None
            self.pauses.append((self.trigger, self.paused_from, t))
            self.paused, self.paused_from = False, None
            self.cursor = calendar.first_after(self.trigger, t)
            self._pass(t)
        elif op == "remove":
            self.removed = True

    def edit(self, t: int, trigger: Any) -> None:
        self._pass(t)
        if trigger == self.trigger or self.removed:
            return
        if self.paused:
            assert self.paused_from is not None
            self.pauses.append((self.trigger, self.paused_from, t))
            self.paused_from, end = t + 1, t
        elif self.cursor is not None and self.cursor <= t:
            end = self.cursor  # already due: it fires, and the new trigger goes on after it
        else:
            end = t
            self.cursor = calendar.first_after(trigger, t)
        self.spans[-1].hi = end
        self.spans.append(Span(trigger, end, gaps_from=t))
        self.trigger = trigger
        self._pass(t)

    # -- the check ------------------------------------------------------------------------------

    def _slots(self, trigger: Any, lo: int, hi: int) -> list[int]:
        """`trigger`'s slots in (lo, hi], listed once per span and extended as time goes on."""
        have, upto = self._listed.get((trigger, lo), ([], lo))
        if hi > upto:
            have = have + calendar.slots_between(trigger, upto, hi, LIMIT)
            self._listed[(trigger, lo)] = (have, hi)
            upto = hi
        return have[: bisect.bisect_right(have, hi)]

    def handled_below(self, now: int, caught_up: bool) -> int:
        """Slots before this instant are handled: all up to now while a dispatcher is up and
        caught up; else those before the stored next fire (or the pause)."""
        if self.paused:
            assert self.paused_from is not None
            return min(self.paused_from, now + 1)
        if caught_up:
            return now + 1
        return min(self.cursor, now + 1) if self.cursor is not None else now + 1

    def expected(self, now: int, caught_up: bool) -> dict[int, str]:
        """slot -> "any" (one outcome) or "paused" (one, `skipped: paused`), up to what is
        handled."""
        below = self.handled_below(now, caught_up)
        out: dict[int, str] = {}
        for sp in self.spans:
            hi = min(now, below - 1) if sp.hi is None else min(sp.hi, now, below - 1)
            for s in self._slots(sp.trigger, sp.lo, hi):
                out[s] = "any"
        for trig, first, last in self.pauses:
            for s in self._slots(trig, first - 1, last):
                out[s] = "paused"
        for s in self.kept_paused:
            if s <= now:
                out[s] = "paused"
        return out

    def _gaps(self, now: int, handled: Iterable[int]) -> tuple[set[int], set[int]]:
        """(instants where a gap of a span's `dst_gap="skip"` trigger dropped a slot, the
        ones a later fire of that span has passed: they must have their record by now)."""
        fired = sorted(handled)
        anywhere, due = set(), set()
        for sp in self.spans:
            spec = calendar.spec_of(sp.trigger)
            if not isinstance(spec, calendar.CronSpec) or calendar.policy(spec)[0] != "skip":
                continue
            hi = now if sp.hi is None else min(sp.hi, now)
            own = set(self._slots(sp.trigger, sp.lo, hi))
            shifted = replace(spec, dst_gap="shift")
            for g in calendar.slots_between(shifted, sp.gaps_from, hi, LIMIT):
                if g in own:
                    continue
                anywhere.add(g)
                i = bisect.bisect_right(fired, g)
                if i < len(fired) and fired[i] < (sp.hi if sp.hi is not None else now + 1):
                    due.add(g)
        return anywhere, due

    def problems(self, ledger: list[tuple[int, str, str, str]], backlog: Iterable[int],
                 now: int, caught_up: bool) -> list[str]:  # fmt: skip
        """What is wrong with `ledger` ((slot, outcome, reason, run id) rows) at `now`."""
        if self.removed:
            return [f"outcomes after the rule was removed: {ledger}"] if ledger else []
        want = self.expected(now, caught_up)
        got, gap_rows = _outcomes(ledger)
        waiting = set(backlog)
        out = []
        for s, kind in sorted(want.items()):
            n = got.get(s, [])
            if not n and s in waiting:
                continue
            if len(n) != 1:
                out.append(f"slot {s} has {len(n)} outcomes {n}, not one")
            elif kind == "paused" and n[0] != ("skipped", "paused"):
                out.append(f"slot {s} was paused but is recorded {n[0]}")
        out += [f"an outcome {got[s]} for {s}, not a due slot" for s in sorted(got.keys() - want)]
        out += [f"slot {s} is waiting to be replayed but is not due" for s in waiting - want.keys()]
        anywhere, due = self._gaps(now, [s for s, k in want.items() if k == "any" and s in got])
        out += [f"a dst_gap record at {g}, where no gap dropped a slot"
                for g in sorted(gap_rows.keys() - anywhere)]  # fmt: skip
        out += [f"dst_gap at {g} recorded {gap_rows[g]} times, not once"
                for g in sorted(due) if gap_rows[g] != 1]  # fmt: skip
        return out


def _outcomes(ledger: list[tuple[int, str, str, str]]) -> tuple[dict[int, list[tuple[str, str]]],
                                                                Counter[int]]:  # fmt: skip
    """Each slot's outcomes, and the dst_gap records per instant. A backfill's record is not a
    slot's outcome (the slot has its own), nor is a manual fire's (its instant is no slot)."""
    got: dict[int, list[tuple[str, str]]] = {}
    gaps: Counter[int] = Counter()
    for s, o, r, rid in ledger:
        if o in ("backfilled", "manual") or "@manual:" in rid:
            continue
        if (o, r) == ("skipped", "dst_gap"):
            gaps[s] += 1
        else:
            got.setdefault(s, []).append((o, r))
    return got, gaps
