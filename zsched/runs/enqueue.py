"""Enqueue on a QueueContext: one run checked and packed (`build`), runs routed to their
partitions and sent in bounded calls (`send`), the ids returned, the counters fed.

One `App.enqueue()` is one `build` and one `send` of one group: a single enqueue.lua call on
the direct path, no routing and no pipeline (the hot path; BENCHMARKS.md "One-call enqueue").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from zsched.errors import InvalidArgument, PayloadError
from zsched.protocol.envelope import Payload, check_payload, encode_first
from zsched.protocol.keys import QueueKeys
from zsched.protocol.replies import EnqueueCode
from zsched.protocol.runids import fresh_run_id
from zsched.runs.controls import EnqueueOutcome
from zsched.runs.runinput import check_names, delay_ms, to_ms
from zsched.store import delayed as _delayed
from zsched.store import durable as _durable
from zsched.store import scripts as S

if TYPE_CHECKING:
    from zsched.context import QueueContext

#: Runs per enqueue.lua call: 100 take ~0.5 ms of Redis time into a small queue and up to
#: ~2.5 ms into one of 1M runs due at random instants (ZADD into a big skiplist misses cache),
#: under the 5 ms any script may hold Redis (1000, the scripts' bound, took 5+ ms).
ENQUEUE_BATCH = 100

#: One run to enqueue: (run_id, run_at ms or "+delay", task, envelope).
Group = tuple[str, int | str, str, bytes]


class EnqueueOptions(TypedDict, total=False):
    """enqueue's keyword arguments (App.enqueue documents them), for typed signatures that
    pass them on."""

    run_at: datetime | float | None
    delay: timedelta | float | None
    run_id: str | None
    on_conflict: str
    max_delay: timedelta | float | None


class BuildOptions(TypedDict, total=False):
    """`build`'s keyword arguments: when the run is due, its id, the trace context."""

    run_at: datetime | float | None
    delay: timedelta | float | None
    run_id: str | None
    trace: dict[str, str] | None


class EnqueuedId(str):
    """A run id returned by enqueue; `.duplicate` says whether it was already live or done,
    `.replaced` whether a waiting run took the new payload (on_conflict="replace"/"debounce"),
    `.outcome` which of these happened (a zsched.EnqueueOutcome)."""

    duplicate: bool = False
    replaced: bool = False

    def __new__(
        cls, value: str, duplicate: bool = False, outcome: EnqueueOutcome | None = None
    ) -> EnqueuedId:
        obj = super().__new__(cls, value)
        if duplicate:  # the class default covers the common case without an instance dict
            obj.duplicate = True
        if outcome is not None:
            obj.__dict__["_outcome"] = outcome
            obj.replaced = outcome in (EnqueueOutcome.REPLACED, EnqueueOutcome.DEBOUNCED)
        return obj

    @property
    def outcome(self) -> EnqueueOutcome:
        got: EnqueueOutcome | None = self.__dict__.get("_outcome")
        if got is not None:
            return got
        return EnqueueOutcome.DUPLICATE if self.duplicate else EnqueueOutcome.ENQUEUED


# Bound once: looking a member up on an Enum class costs ~0.3 us, paid per run otherwise.
ENQUEUED, _DUPLICATE_DONE = EnqueueCode.ENQUEUED, EnqueueCode.DUPLICATE_DONE


def enqueued(run_id: str, duplicate: bool, code: int) -> EnqueuedId:
    """The id enqueue returns: a duplicate says whether it met a live or a recently done run."""
    if not duplicate:
        return EnqueuedId(run_id)
    done = EnqueueOutcome.DUPLICATE_DONE if code == _DUPLICATE_DONE else None
    return EnqueuedId(run_id, True, done)


def enqueued_id(ctx: QueueContext, run_id: str, code: int, named: bool) -> EnqueuedId:
    """The id one enqueue returns for `code`, counted (App and AsyncApp). A generated id
    (`named` False) can only meet an earlier attempt of this very call, whose reply was
    lost: never a duplicate."""
    dup = code != ENQUEUED and named
    count(ctx, 0 if dup else 1, 1 if dup else 0)
    return enqueued(run_id, dup, code)


def enqueued_ids(ctx: QueueContext, out: list[EnqueuedId | None], groups: list[Group],
                 keep: list[int], codes: list[int], given: list[bool]) -> list[EnqueuedId]:  # fmt: skip
    """enqueue_many's answer: `out` (conflict runs filled in) with the plain runs `keep` of
    `groups` filled in from their `codes`, counted once for the batch."""
    dups = [c != ENQUEUED and given[i] for i, c in zip(keep, codes, strict=True)]
    count(ctx, len(dups) - sum(dups), sum(dups))
    for i, c, d in zip(keep, codes, dups, strict=True):
        out[i] = enqueued(groups[i][0], d, c)
    return [r for r in out if r is not None]


def duplicates_in(codes: list[int]) -> int:
    """How many enqueue codes are not ENQUEUED (what the tracing span records)."""
    return sum(1 for c in codes if c != ENQUEUED)


def build(
    ctx: QueueContext,
    task_name: str,
    payload: Payload = None,
    *,
    run_at: datetime | float | None = None,
    delay: timedelta | float | None = None,
    run_id: str | None = None,
    trace: dict[str, str] | None = None,
) -> Group:
    """Validate one run and return its enqueue group (run_id, run_at, task, envelope).
    `trace`: the W3C trace context to carry (zsched/observability/tracing.py)."""
    check_names(task_name, run_id)
    codec = ctx.payload_types.get(task_name)
    if codec is not None:
        payload = codec.to_wire(payload)
    if run_at is not None and delay is not None:
        raise InvalidArgument("give run_at or delay, not both")
    now = ctx.local_ms()
    at: int | str
    if run_at is not None:
        at = due = to_ms(run_at)
    else:
        d = delay_ms(delay) if delay is not None else 0
        due = now + d
        at = f"+{d}" if ctx.clock.now_ms() is None else due
    rid = run_id or fresh_run_id()
    limit = ctx.settings.max_payload_bytes
    try:
        env = encode_first(task_name, payload, due, now, trace)
    except PayloadError:
        check_payload(payload, limit)  # raises, naming the type
        raise
    # The payload is packed once, inside the envelope; only a large envelope needs the
    # payload measured alone against the limit.
    if len(env) > limit:
        check_payload(payload, limit)
    return rid, at, task_name, env


def build_item(
    ctx: QueueContext,
    item: Mapping[str, Any] | tuple[Any, ...],
    trace: Any,
    groups: list[Group],
    modes: dict[int, tuple[str, Any]],
    given: list[bool],
) -> None:
    """One enqueue_many item onto the lists: its group; its conflict mode if it sets one;
    whether the caller named its run id (a generated one is never a duplicate)."""
    if not isinstance(item, Mapping):
        given.append(False)  # (task, payload): the id is generated
        groups.append(build(ctx, *item, trace=trace))
        return
    kw = dict(item)
    if "task" not in kw:
        raise InvalidArgument(f"enqueue_many item {len(groups)} has no 'task'", "task")
    mode, cap = kw.pop("on_conflict", "keep"), kw.pop("max_delay", None)
    if mode != "keep" or cap is not None:
        modes[len(groups)] = (mode, cap)
    given.append(kw.get("run_id") is not None)
    groups.append(build(ctx, kw.pop("task"), kw.pop("payload", None), trace=trace, **kw))


def send(ctx: QueueContext, groups: list[Group]) -> list[int]:
    """Route runs to their partitions, enqueue them in calls of at most ENQUEUE_BATCH (durably
    if asked), and return one reply code per run, in order."""
    ctx.claim_layout()
    if ctx.partitions == 1 and not ctx.durable and len(groups) == 1:
        # One call, the common case (every enqueue()): no routing, no pipeline.
        return ctx.scripts.run(call(ctx, groups))
    batches, calls = plan(ctx, groups)
    codes = [0] * len(groups)
    for batch, reply in zip(batches, _durable.run_calls(ctx, calls), strict=True):
        for i, code in zip(batch, reply, strict=True):
            codes[i] = code
    return codes


def plan(ctx: QueueContext, groups: list[Group]) -> tuple[list[list[int]], list[S.Call[list[int]]]]:
    """The enqueue calls for `groups` (per partition, at most ENQUEUE_BATCH runs each, in
    due order) and, per call, the indexes of its runs in `groups` (shared with AsyncApp)."""
    from zsched.store.partitions import run_partition

    by_part: dict[int, list[int]] = {}
    for i in _delayed.due_order(groups):
        by_part.setdefault(run_partition(groups[i][0], ctx.partitions), []).append(i)
    batches: list[list[int]] = []
    calls: list[S.Call[list[int]]] = []
    for part, idx in by_part.items():
        keys = ctx.keys if ctx.partitions == 1 else QueueKeys(ctx.queue, part)
        for j in range(0, len(idx), ENQUEUE_BATCH):
            batches.append(idx[j : j + ENQUEUE_BATCH])
            calls.append(call(ctx, [groups[i] for i in batches[-1]], keys))
    return batches, calls


def call(
    ctx: QueueContext, groups: list[Group], keys: QueueKeys | None = None
) -> S.Call[list[int]]:
    """One enqueue.lua call for `groups` (all in one partition: `keys`, default the context's)."""
    settings = ctx.settings
    return S.enqueue(
        keys or ctx.keys,
        groups,  # type: ignore[arg-type]
        now_ms=ctx.clock.now_ms(),
        dedupe_window_ms=settings.dedupe_window_ms,
        max_envelope_bytes=settings.max_payload_bytes + 4096,
    )


def count(ctx: QueueContext, added: int, duplicates: int) -> None:
    """Feed the enqueued and duplicates counters."""
    if added:
        # The labelled child is cached: labels() cost ~8 us, a tenth of one enqueue().
        cached = ctx.shared.enqueued_child
        if cached is None or cached[0] is not ctx.metrics:
            cached = ctx.shared.enqueued_child = (
                ctx.metrics,
                ctx.metrics.enqueued.labels(ctx.queue),
            )
        cached[1].inc(added)
    if duplicates:
        ctx.metrics.duplicates.labels(ctx.queue, "enqueue").inc(duplicates)
