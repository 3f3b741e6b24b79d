"""enqueue.lua's envelope given as its stored value (its due tag first): the same stored data as
an envelope given alone, a tag that is not run_at_ms refused, the limit on the envelope part."""

from __future__ import annotations

import pytest
import redis

from zsched.protocol.envelope import Envelope
from zsched.protocol.replies import EnqueueCode
from zsched.store import delayed as D
from zsched.store import scripts as S
from zsched.store.replies import int_list

NOW = 1_800_000_000_000


def env(i: int) -> bytes:
    return Envelope(f"r{i}", "t", {"n": i, "pad": "x" * 40}, NOW, NOW, NOW).encode()


def raw(backend, queue, groups, max_bytes=10_000):
    """enqueue.lua with `groups` exactly as given (the wrapper would tag int dues)."""
    app = backend.app(queue)
    k = app.keys
    args = [NOW, 60_000, max_bytes, *(x for g in groups for x in g)]
    call = S.Call("enqueue", [k.delayed, k.runs, k.done, k.stats, k.wake], args, int_list)
    return app, app.scripts.run(call)


def _groups(n: int) -> list[tuple]:
    # Dues out of order, ties, one a run id that sorts first: the batch's sort and leaf splits.
    return [(f"r{i:04d}", NOW + (i * 7919) % 97 * 1000, "t", env(i)) for i in range(n)]


@pytest.mark.parametrize("n", [1, 3, 200])
def test_a_tagged_batch_stores_exactly_what_an_untagged_one_stores(backend, queue, n) -> None:
    plain = _groups(n)
    tagged = [(r, at, t, D.tag(at, e)) for r, at, t, e in plain]
    a, codes_a = raw(backend, queue, plain)
    b, codes_b = raw(backend, queue + "-b", tagged)
    assert codes_a == codes_b == [EnqueueCode.ENQUEUED] * n
    for key in ("runs", "stats"):
        assert backend.sync.hgetall(getattr(a.keys, key)) == backend.sync.hgetall(
            getattr(b.keys, key)
        )
    assert D.runs(backend.sync, a.keys) == D.runs(backend.sync, b.keys)
    index = [backend.sync.zrange(x.keys.delayed_index, 0, -1) for x in (a, b)]
    assert index[0] == index[1]
    # Every value is the documented tag and the envelope, either way.
    runs = backend.sync.hgetall(b.keys.runs)
    assert runs == {r.encode(): D.tag(at, e) for r, at, _, e in plain}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            D.tag(NOW + 1001, b"\x95x"),
            r"envelope starts with \\0 \(a due tag\) for 1800000001001, not run_at_ms 1800000001000",
        ),
        (
            b"\0\0\0",
            r"envelope starts with \\0 \(a due tag\) but is shorter than the tag's 7 bytes",
        ),
        (D.tag(NOW + 1000, b""), "envelope is empty"),
    ],
)
def test_a_tag_that_is_not_run_at_is_refused_and_nothing_is_written(backend, queue, value, message):
    good = ("good", NOW + 1000, "t", D.tag(NOW + 1000, env(1)))
    app = backend.app(queue)
    with pytest.raises(redis.ResponseError, match=f"run bad: {message}"):
        raw(backend, queue, [good, ("bad", NOW + 1000, "t", value)])
    assert backend.sync.hgetall(app.keys.runs) == {}
    with pytest.raises(redis.ResponseError, match=f"run bad: {message}"):
        raw(backend, queue, [("bad", NOW + 1000, "t", value)])  # the one-call path
    assert backend.sync.hgetall(app.keys.runs) == {}


def test_the_envelope_limit_counts_the_envelope_not_its_tag(backend, queue) -> None:
    at = NOW + 1000
    _, codes = raw(backend, queue, [("fits", at, "t", D.tag(at, b"\x95" * 100))], max_bytes=100)
    assert codes == [EnqueueCode.ENQUEUED]
    with pytest.raises(redis.ResponseError, match="envelope is 101 bytes, over the limit of 100"):
        raw(backend, queue, [("over", at, "t", D.tag(at, b"\x95" * 101))], max_bytes=100)


def test_the_wrapper_sends_epoch_dues_tagged_and_relative_ones_alone() -> None:
    from zsched.protocol.keys import QueueKeys

    e = env(1)
    call = S.enqueue(QueueKeys("q"), [("a", NOW, "t", e), ("b", "+500", "t", e)],
                     now_ms=None, dedupe_window_ms=1, max_envelope_bytes=10)  # fmt: skip
    assert call.args[3:] == ["a", NOW, "t", D.tag(NOW, e), "b", "+500", "t", e]
