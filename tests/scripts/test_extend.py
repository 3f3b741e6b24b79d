"""extend (and hold, its former name): a rule's run waiting for its retry keeps its own overlap
lease for the whole wait, without a TTL (the lease lasts while its run lives; one an older
fire.lua gave a TTL loses it), and never takes one it does not have."""

from __future__ import annotations

import pytest

from zsched.store import scripts as S

SID, RUN = "sweep", "sweep@2027-01-15T08:00:00Z"


def _run(app, r, name: str, ttl_ms: int = 600_000) -> bool:
    call = S.extend(app.keys, SID, RUN, ttl_ms)
    if name == "extend":
        return app.scripts.run(call)
    # The alias file, loaded by name as a client would: the same keys, arguments and reply.
    return call.decode(r.eval(S.source(name), len(call.keys), *call.keys, *call.args))


@pytest.mark.parametrize("name", ["extend", *S.ALIASES])
@pytest.mark.parametrize(
    ("holder", "live", "expected"),
    [
        (RUN, True, True),  # its own lease, the run live: kept, no TTL
        (None, True, False),  # no lease (the rule was removed, or it lapsed): not taken back
        ("sweep@other", True, False),  # another run of the rule holds it: left alone
        (RUN, False, False),  # the run is no longer live: its lease is not extended
    ],
)
def test_extend_lengthens_only_a_live_runs_own_lease(
    backend, queue, name, holder, live, expected
) -> None:
    app = backend.app(queue)
    k, r = app.keys, backend.sync
    if holder is not None:
        r.set(k.lease(SID), holder, px=2000)
    if live:
        r.hset(k.runs, RUN, b"envelope")
    assert _run(app, r, name) is expected
    assert r.get(k.lease(SID)) == (None if holder is None else holder.encode())
    ttl = r.pttl(k.lease(SID))
    if expected:
        assert ttl == -1  # no TTL: it cannot lapse while the run waits
    elif holder is not None:
        assert 0 < ttl <= 2000  # unchanged
    assert r.hexists(k.runs, RUN) is live  # the run itself is never touched


def test_extend_refuses_an_empty_run_id_or_a_ttl_below_one_ms(backend, queue) -> None:
    app = backend.app(queue)
    bad = S.extend(app.keys, SID, RUN, 1)
    for args in (["", 1000], [RUN, 0], [RUN, "x"]):
        with pytest.raises(Exception, match="run_id must be non-empty and ttl_ms"):
            app.scripts.run(S.Call("extend", bad.keys, args, bad.decode))
