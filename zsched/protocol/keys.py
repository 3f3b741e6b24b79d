"""Every Redis key name of zsched. This is the only module that spells one.

All keys of one queue (or one partition of a queue) carry the same hash tag, so every script
touches a single Redis Cluster slot. The layout is documented for other languages in
docs/protocol.md; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zsched.errors import InvalidArgument

PREFIX = "zsched"
#: Name of the consumer group every worker joins on the ready stream.
GROUP = "workers"


def hash_tag(queue: str, partition: int | None = None) -> str:
    """The cluster hash tag of a queue, or of one of its partitions."""
    if not queue or any(c in queue for c in "{}"):
        raise InvalidArgument(
            f"queue name {queue!r} must be non-empty and contain no braces", "queue"
        )
    return f"{{{queue}}}" if partition is None else f"{{{queue}#{partition}}}"


@dataclass(frozen=True)
class QueueKeys:
    """Key names of one queue (partition). Each attribute names its Redis type."""

    queue: str
    partition: int | None = None
    tag: str = field(init=False)
    #: The delayed set (runs waiting for their time), key layout 3: a B-tree of small sorted
    #: sets (lua/lib/btree.lua) made of this key, `delayed_index` and `delayed_leaf(n)`. A
    #: sorted set here is the one set of key layout 2, which `zsched migrate` moves.
    #: HASH seq (last leaf number), n (runs in the delayed set).
    delayed: str = field(init=False)
    #: ZSET, scores 0: one member per leaf, `<bound><leaf number>` (lex order = due order).
    delayed_index: str = field(init=False)
    #: Every live run (delayed, ready or running); the live set. A value starts with a 7-byte
    #: due tag: 0x00, then the due in ms, 6 bytes big-endian (`delayed.untag`).
    #: HASH run_id -> due tag + envelope (delayed), or its stream entry id (on the stream).
    runs: str = field(init=False)
    #: STREAM of due runs; fields run_id, envelope. Read by the consumer group GROUP.
    ready: str = field(init=False)
    #: In zsched 0.2 a HASH run_id -> entry id of a run on the stream; from 0.3 on dispatch.lua
    #: sets a STRING here, so that 0.2's scripts refuse to run (docs/operations.md).
    #: STRING (a note; 0.2: a HASH).
    entries: str = field(init=False)
    #: The runs a zsched 0.2 dispatcher put on the stream (its `entries`, renamed by
    #: dispatch.lua), emptied as they finish.
    #: HASH run_id -> stream entry id.
    legacy_entries: str = field(init=False)
    #: STREAM of dead letters; fields run_id, reason, envelope, dead_at_ms, entry_id.
    dead: str = field(init=False)
    #: ZSET run_id -> done_at_ms. Completion records, trimmed after the dedupe window.
    done: str = field(init=False)
    #: HASH counter -> integer. Queue-wide counts kept by the scripts (duplicates, fenced ...).
    stats: str = field(init=False)
    #: Pub/sub CHANNEL. Enqueue publishes the new earliest run_at_ms here to wake dispatchers.
    wake: str = field(init=False)
    #: HASH schedule_id -> rule (msgpack). Recurring rules.
    rules: str = field(init=False)
    #: ZSET schedule_id -> next fire ms. When each active rule fires next.
    rule_next: str = field(init=False)
    #: HASH schedule_id -> rule state (msgpack): last fire, last outcome, missed count.
    rule_state: str = field(init=False)
    #: HASH schedule_id -> envelope of the one fire waiting for its rule's lease (overlap=queue).
    rule_waiting: str = field(init=False)
    #: ZSET schedule_id -> oldest slot still waiting to be replayed (misfire = catch_up).
    rule_catchup: str = field(init=False)
    #: The triggers edits replaced, oldest first, at most 16, each with the span its slots
    #: were the rule's (zsched/rules/past_triggers.py), for the audit.
    #: HASH schedule_id -> trigger history (msgpack array).
    rule_triggers: str = field(init=False)
    #: STRING: a random marker set once (SET NX); gone or changed = Redis lost the data.
    epoch: str = field(init=False)
    #: ZSET run_id -> latest due allowed (ms): the deadline of a debounced run (replace.lua).
    debounce: str = field(init=False)
    #: ZSET run_id -> cancelled_at_ms. Runs cancelled (revoke, discard), kept for the window.
    cancelled: str = field(init=False)
    #: HASH run_id -> outcome (msgpack: attempts, duration, return value) of finished runs.
    outcomes: str = field(init=False)
    #: ZSET run_id -> recorded_at_ms: when each outcome was kept (trimmed after the window).
    outcome_times: str = field(init=False)
    #: Queue controls. paused_ms, pause_note: present while the queue (partition) is paused
    #: (pause.lua); entries: "tagged" while dispatch.lua writes tagged ready entries.
    #: HASH paused_ms, pause_note, entries.
    control: str = field(init=False)
    #: ZSET dispatcher name -> its last heartbeat ms (zsched/dispatch/heartbeat.py; old ones trimmed).
    dispatchers: str = field(init=False)
    #: Consumers of the ready stream that read both shapes of an entry (docs/protocol.md):
    #: set by each worker as it starts and removed as it leaves the group (a crashed worker's
    #: stays, like its consumer); `zsched entries` and the console read it to name the
    #: consumers that may read plain entries only.
    #: HASH consumer name -> the entry shapes it reads ("plain,tagged").
    readers: str = field(init=False)

    def __post_init__(self) -> None:
        tag = hash_tag(self.queue, self.partition)
        base = f"{PREFIX}:{tag}:"
        set_ = object.__setattr__
        set_(self, "tag", tag)
        for name in (
            "delayed",
            "runs",
            "ready",
            "entries",
            "dead",
            "done",
            "stats",
            "wake",
            "rules",
            "rule_next",
            "rule_state",
            "rule_waiting",
            "rule_catchup",
            "rule_triggers",
            "epoch",
            "debounce",
            "cancelled",
            "outcomes",
            "outcome_times",
            "control",
            "dispatchers",
            "readers",
        ):
            set_(self, name, base + name)
        set_(self, "delayed_index", self.delayed + ":index")
        set_(self, "legacy_entries", self.entries + ":legacy")  # lua/lib/current.lua

    def delayed_leaf(self, n: int | str) -> str:
        """ZSET run_id -> due_ms: leaf `n` of the delayed set's B-tree (at most 64 runs)."""
        return f"{self.delayed}:leaf:{n}"

    def lease(self, schedule_id: str) -> str:
        """STRING with a TTL: the overlap lease of a rule's running fire (value = run_id)."""
        return f"{PREFIX}:{self.tag}:lease:{schedule_id}"

    def ledger(self, schedule_id: str) -> str:
        """STREAM, capped: the fire ledger of one rule (one outcome per slot)."""
        return f"{PREFIX}:{self.tag}:ledger:{schedule_id}"

    def cancel_request(self, run_id: str) -> str:
        """STRING with a TTL: a cancel request for a running run (value = its stream entry id)."""
        return f"{PREFIX}:{self.tag}:cancel:{run_id}"

    def limit_holders(self, limit: str) -> str:
        """ZSET entry_id -> hold expiry ms: the concurrency semaphore of one limit (a task, or
        `<task>#<limit key>`)."""
        return f"{PREFIX}:{self.tag}:limit:{limit}:holders"

    def limit_bucket(self, limit: str) -> str:
        """HASH tokens, ts_ms: the rate limit's token bucket of one limit (task or task#key)."""
        return f"{PREFIX}:{self.tag}:limit:{limit}:bucket"

    def limit_waiting(self, limit: str) -> str:
        """ZSET run_id -> retry ms: runs of a task deferred by its limits, not started since
        (`limit` is the task name)."""
        return f"{PREFIX}:{self.tag}:limit:{limit}:waiting"

    def celery_sent(self, run_id: str) -> str:
        """STRING with a TTL: the Celery bridge sent run `run_id` (a redelivery skips the send)."""
        return f"{PREFIX}:{self.tag}:celery:sent:{run_id}"

    def celery_done(self, run_id: str) -> str:
        """LIST with a TTL: the Celery task of run `run_id` finished (pushed by the worker hook)."""
        return f"{PREFIX}:{self.tag}:celery:done:{run_id}"

    def django_result(self, run_id: str) -> str:
        """STRING (JSON) with a TTL: the django.tasks result of run `run_id` (status, times,
        return value, errors), written by the Django backend and its worker."""
        return f"{PREFIX}:{self.tag}:django:result:{run_id}"

    def all_fixed(self) -> list[str]:
        """Every fixed key of the queue (not the per-rule ones), for cleanup and inspection."""
        return [
            self.delayed,
            self.delayed_index,
            self.runs,
            self.ready,
            self.entries,
            self.legacy_entries,
            self.dead,
            self.done,
            self.stats,
            self.rules,
            self.rule_next,
            self.rule_state,
            self.rule_waiting,
            self.rule_catchup,
            self.rule_triggers,
            self.epoch,
            self.debounce,
            self.cancelled,
            self.outcomes,
            self.outcome_times,
            self.control,
            self.dispatchers,
        ]

    def pattern(self) -> str:
        """A SCAN pattern that matches every key of this queue (partition)."""
        return f"{PREFIX}:{self.tag.replace('{', '[{]').replace('}', '[}]')}:*"


def partitions_key(queue: str) -> str:
    """STRING: the partition count of a partitioned queue, written once by its first user.

    It lives under the queue's own tag `{q}`, which no partition uses, so it names the queue as
    a whole. Absent = the queue is not partitioned (its keys are those of `QueueKeys(queue)`).
    """
    return f"{PREFIX}:{hash_tag(queue)}:partitions"
