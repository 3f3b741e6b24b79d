"""metrics.observe_many gives the samples one Histogram.observe() per amount would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram

from zsched.observability.metrics import LAG_BUCKETS, observe_many


def _samples(h: Histogram) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for m in h.collect() for s in m.samples
            if not s.name.endswith("_created")]  # fmt: skip


def _pair() -> tuple[Histogram, Histogram]:
    return (
        Histogram("one", "d", ["q"], buckets=LAG_BUCKETS, registry=CollectorRegistry()),
        Histogram("many", "d", ["q"], buckets=LAG_BUCKETS, registry=CollectorRegistry()),
    )


def test_a_batch_lands_in_the_same_buckets_as_single_observes() -> None:
    rng = random.Random(3)
    # Random lags, every bound exactly (a bound is inclusive), zero, and over the last bound.
    amounts = [rng.choice([rng.random() / 100, rng.random() * 10, rng.random() * 5000])
               for _ in range(3000)] + list(LAG_BUCKETS) + [0.0, 0.0, 7200.0]  # fmt: skip
    one, many = _pair()
    for a in amounts:
        one.labels("q").observe(a)
    for i in range(0, len(amounts), 500):
        observe_many(many.labels("q"), amounts[i : i + 500])
    got = [(n.replace("many", "one"), lb, v) for n, lb, v in _samples(many)]
    want = _samples(one)
    assert [(n, lb) for n, lb, _ in got] == [(n, lb) for n, lb, _ in want]
    for (_, lb, v), (_, _, w) in zip(got, want, strict=True):
        assert abs(v - w) < 1e-6 * max(1.0, abs(w)), lb


def test_an_empty_batch_changes_nothing_and_other_layouts_fall_back_to_observe() -> None:
    one, _ = _pair()
    observe_many(one.labels("q"), [])
    assert all(v == 0 for n, _, v in _samples(one))

    class Plain:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, a: float) -> None:
            self.seen.append(a)

    p = Plain()
    observe_many(p, [0.5, 2.0])
    assert p.seen == [0.5, 2.0]
