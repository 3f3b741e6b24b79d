"""Bounded Redis reads the console needs and the App does not offer: a page of the delayed set
in due order, one run's payload, a bounded scan of dead letters, the workers of
the consumer group and the newest entries of the ready stream.

Every function here reads at most a fixed amount (stated in its docstring): a page view can
never block Redis, and no function walks the keyspace (no KEYS, no SCAN). Writes never happen
here; actions go through the App.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from zsched.errors import PayloadError
from zsched.protocol.envelope import Envelope, decode
from zsched.protocol.keys import QueueKeys
from zsched.protocol.text import lossy_text
from zsched.runs import entry_shape
from zsched.runs.status import entry_envelope, is_entry_id
from zsched.store.delayed import leaf_number, untag
from zsched.store.replies import dead_envelope

#: Most rows on one page of any list.
PAGE_MAX = 100
#: Leaves of the delayed set's B-tree read per round (each holds at most 64 runs).
LEAVES_PER_ROUND = 8
#: Runs examined per page when filtering delayed runs by task (envelopes read: bounded).
FILTER_SCAN_MAX = 1000
#: Dead letters examined per request when filtering or counting a bulk action.
DEAD_SCAN_MAX = 10_000
DEAD_BATCH = 500
#: Consumers of the group shown (XINFO CONSUMERS lists every one; a group has few).
CONSUMERS_MAX = 100


# -- the delayed set, page by page -------------------------------------------------------------


def tree_key(due_ms: int, run_id: str) -> bytes:
    """A run's key in the B-tree (lua/lib/btree.lua: bt_key): byte order = (due, id) order."""
    return b"%015d" % due_ms + run_id.encode().replace(b"\0", b"\0\1") + b"\0\0"


def encode_cursor(due_ms: int, run_id: str) -> str:
    """An opaque cursor naming the last run shown: the next page starts after it."""
    return base64.urlsafe_b64encode(b"%d:" % due_ms + run_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str] | None:
    """(due_ms, run_id) of a cursor, or None for an empty or malformed one (first page)."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        due, _, rid = raw.partition(b":")
        return int(due), rid.decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class DelayedRow:
    """One delayed run on a page: id, due, and its task (None if the envelope is unreadable)."""

    run_id: str
    due_ms: int
    task: str | None


@dataclass(frozen=True)
class DelayedPage:
    rows: list[DelayedRow]
    next_cursor: str | None
    scanned: int


def _leaves_after(r: Any, k: QueueKeys, after: tuple[int, str] | None, first: bool) -> list[bytes]:
    """Index members of up to LEAVES_PER_ROUND leaves that may hold runs after `after`: the
    leaf holding `after` (when `first`) and the leaves following it."""
    if after is None:
        return list(r.zrange(k.delayed_index, 0, LEAVES_PER_ROUND - 1))
    key = tree_key(*after)
    pipe = r.pipeline(transaction=False)
    pipe.zrevrangebylex(k.delayed_index, b"[" + key, b"-", start=0, num=1)
    pipe.zrangebylex(k.delayed_index, b"(" + key, b"+", start=0, num=LEAVES_PER_ROUND)
    own, later = pipe.execute()
    return (list(own) if first else []) + list(later)


def delayed_page(
    r: Any, k: QueueKeys, cursor: str = "", task: str = "", limit: int = PAGE_MAX
) -> DelayedPage:
    """Delayed runs in due order after `cursor`, at most `limit` (<= 100); with `task`, only
    runs of that task, examining at most FILTER_SCAN_MAX runs (the cursor then says where the
    scan stopped). Reads at most LEAVES_PER_ROUND leaves (64 runs each) per round trip."""
    limit = max(1, min(limit, PAGE_MAX))
    after = decode_cursor(cursor)
    rows: list[DelayedRow] = []
    scanned, first = 0, True
    while len(rows) < limit and scanned < FILTER_SCAN_MAX:
        members = _leaves_after(r, k, after, first)
        first = False
        if not members:
            return DelayedPage(rows, None, scanned)
        pipe = r.pipeline(transaction=False)
        for m in members:
            pipe.zrange(k.delayed_leaf(leaf_number(m)), 0, -1, withscores=True)
        runs = [(int(due), lossy_text(rid)) for leaf in pipe.execute() for rid, due in leaf]
        runs.sort(key=lambda x: tree_key(x[0], x[1]))
        if after is not None:
            bound = tree_key(*after)
            runs = [x for x in runs if tree_key(*x) > bound]
        if not runs:  # only the cursor's own leaf was left, and nothing after it
            return DelayedPage(rows, None, scanned)
        take = runs[: (limit - len(rows)) if not task else FILTER_SCAN_MAX - scanned]
        tasks = _tasks(r, k, [rid for _, rid in take])
        for (due, rid), t in zip(take, tasks, strict=True):
            scanned += 1
            after = (due, rid)
            if not task or t == task:
                rows.append(DelayedRow(rid, due, t))
                if len(rows) >= limit:
                    break
    nxt = encode_cursor(*after) if after is not None else None
    return DelayedPage(rows, nxt, scanned)


def _tasks(r: Any, k: QueueKeys, run_ids: list[str]) -> list[str | None]:
    """The task of each run, from its envelope in `runs` (HMGET of at most FILTER_SCAN_MAX)."""
    if not run_ids:
        return []
    out: list[str | None] = []
    for rid, raw in zip(run_ids, r.hmget(k.runs, run_ids), strict=True):
        env = envelope_of(raw, rid)
        out.append(env.task if env else None)
    return out


def envelope_of(raw: bytes | None, run_id: str) -> Envelope | None:
    """The envelope of a value of `runs` or of a dead letter; None if absent or unreadable."""
    if not raw:
        return None
    try:
        return decode(untag(raw)[1], run_id)
    except PayloadError:
        return None


# -- one run ------------------------------------------------------------------------------------


def run_envelope(r: Any, k: QueueKeys, run_id: str, dead: bool) -> Envelope | None:
    """The envelope of a live run (HGET), or of a dead one (the newest DEAD_SCAN_MAX dead
    letters, read in batches of DEAD_BATCH, newest first)."""
    if not dead:
        raw = r.hget(k.runs, run_id)
        if is_entry_id(raw):  # on the stream: in its entry
            raw = entry_envelope(r.xrange(k.ready, raw, raw))
        return envelope_of(raw, run_id)
    end: str | None = "+"
    seen = 0
    while end is not None:
        batch = r.xrevrange(k.dead, end, "-", count=DEAD_BATCH)
        found, end, seen = dead_hit(batch, run_id, seen)
        if found is not None:
            return envelope_of(found, run_id)
    return None


def dead_hit(batch: list[Any], run_id: str, seen: int) -> tuple[bytes | None, str | None, int]:
    """One XREVRANGE batch of run_envelope's newest-first scan: (the run's envelope bytes if
    the batch holds it, where the next batch ends or None when the scan is over, letters
    seen)."""
    for _eid, f in batch:
        if lossy_text(f.get(b"run_id", b"")) == run_id:
            return dead_envelope(f), None, seen
    seen += len(batch)
    if len(batch) < DEAD_BATCH or seen >= DEAD_SCAN_MAX:
        return None, None, seen
    return None, "(" + lossy_text(batch[-1][0]), seen


# -- dead letters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeadMatch:
    """Dead letters matching a filter, from a bounded scan (oldest first)."""

    entry_ids: list[str]
    scanned: int
    complete: bool  # False: the scan stopped at DEAD_SCAN_MAX and more may match
    letters: list[Any] = field(default_factory=list)


class DeadScan:
    """The filter of dead_matching, fed batches of dead letters (oldest first) by a sync or an
    async reader: `feed` returns where the next batch starts, or None when the scan is over
    (the stream's end, or DEAD_SCAN_MAX letters examined)."""

    def __init__(self, task: str = "", reason: str = "", keep: int = 0) -> None:
        self.task, self.reason, self.keep = task, reason, keep
        self.ids: list[str] = []
        self.letters: list[Any] = []
        self.scanned = 0
        self.complete = False

    def feed(self, batch: list[Any]) -> str | None:
        for d in batch:
            if (not self.task or d.task == self.task) and (
                not self.reason or self.reason in d.reason
            ):
                self.ids.append(d.entry_id)
                if len(self.letters) < self.keep:
                    self.letters.append(d)
        self.scanned += len(batch)
        if len(batch) < DEAD_BATCH:
            self.complete = True
            return None
        return None if self.scanned >= DEAD_SCAN_MAX else "(" + batch[-1].entry_id

    def result(self) -> DeadMatch:
        return DeadMatch(self.ids, self.scanned, self.complete, self.letters)


def dead_matching(app: Any, task: str = "", reason: str = "", keep: int = 0) -> DeadMatch:
    """Entry ids of dead letters whose task equals `task` and whose reason contains `reason`
    (empty = any), over at most DEAD_SCAN_MAX letters read DEAD_BATCH at a time; the first
    `keep` matching DeadLetters are returned too (for a page)."""
    scan = DeadScan(task, reason, keep)
    start: str | None = "-"
    while start is not None:
        start = scan.feed(app.dead_letters(count=DEAD_BATCH, start=start))
    return scan.result()


# -- processes and the stream -------------------------------------------------------------------


def consumers(r: Any, k: QueueKeys) -> tuple[str, list[entry_shape.Consumer]]:
    """The shape of the entries dispatchers write, and the group's consumers (XINFO
    CONSUMERS, with what each registered it reads), at most CONSUMERS_MAX, least idle
    first."""
    part = entry_shape.read(r, k)
    return part.shape, sorted(part.consumers, key=lambda c: c.idle_ms)[:CONSUMERS_MAX]


def newest_ready(r: Any, k: QueueKeys, count: int = 5) -> list[tuple[str, str]]:
    """(entry id, run id) of the newest entries on the ready stream (XREVRANGE COUNT)."""
    rows = r.xrevrange(k.ready, "+", "-", count=count)
    return [(lossy_text(eid), lossy_text(f.get(b"run_id", b""))) for eid, f in rows]


def late_rule(r: Any, k: QueueKeys, before_ms: int) -> tuple[str, int] | None:
    """The active rule whose next fire is the oldest before `before_ms`, if any (one read)."""
    rows = r.zrangebyscore(k.rule_next, "-inf", before_ms, start=0, num=1, withscores=True)
    return (lossy_text(rows[0][0]), int(rows[0][1])) if rows else None
