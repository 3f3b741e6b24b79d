"""Read the complete Redis state of a queue, normalised for comparison in tests."""

from __future__ import annotations

from typing import Any

import msgpack

from zsched.protocol.envelope import v2_named
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.runs.status import entry_envelope, is_entry_id
from zsched.store import delayed
from zsched.store.replies import entry_payload


def _s(b: Any) -> Any:
    return b.decode() if isinstance(b, bytes) else b


def _env(raw: bytes) -> Any:
    """An envelope as a map of its fields (a version 2 array named, without its run id), its
    due tag (key layout 3) left out."""
    raw = delayed.untag(raw)[1]
    try:
        d = msgpack.unpackb(raw, raw=False)
    except Exception:  # noqa: BLE001 - tests show undecodable bytes as they are
        return raw
    if isinstance(d, list) and d[:1] == [2]:
        return v2_named(d)
    return d


def snapshot(r: Any, k: QueueKeys) -> dict[str, Any]:
    """Every fixed key of the queue as plain data: zsets as {member: score}, hashes as dicts
    (envelopes decoded), streams as lists of field dicts (ids dropped), plus pending owners."""
    out: dict[str, Any] = {}
    out["delayed"] = dict(delayed.runs(r, k))
    out["done"] = {_s(m): int(s) for m, s in r.zrange(k.done, 0, -1, withscores=True)}
    # A run on the stream is known in `runs` by its entry id (lua/lib/current.lua): shown with
    # the envelope of that entry, as a delayed run is shown with its own.
    raw_runs = r.hgetall(k.runs)
    in_stream = (
        {_s(e): entry_payload(f)[0] for e, f in r.xrange(k.ready)} if r.exists(k.ready) else {}
    )
    on_stream = {_s(a) for a, b in raw_runs.items() if is_entry_id(b)}
    out["runs"] = {
        _s(a): _env(in_stream.get(_s(b), b) if _s(a) in on_stream else b)
        for a, b in raw_runs.items()
    }
    out["stats"] = {_s(a): int(b) for a, b in r.hgetall(k.stats).items()}
    ids = {}
    for name in ("ready", "dead"):
        rows = r.xrange(getattr(k, name)) if r.exists(getattr(k, name)) else []
        out[name] = []
        for eid, f in rows:
            ids[_s(eid)] = len(out[name])
            d = {_s(a): _s(b) for a, b in f.items() if a != b"envelope"}
            if name == "ready":  # either shape of entry (docs/protocol.md, "Keys"): its due
                due = entry_payload(f)[1]
                d["due_ms"] = None if due is None else str(due)
            d.pop("dead_at_ms", None)
            d.pop("entry_id", None)
            out[name].append(d)
    # Runs on the stream: by their entry ids in `runs`, or in `entries` (dispatched before 0.3).
    out["entries"] = sorted(on_stream | {_s(a) for a in r.hkeys(k.legacy_entries)})
    try:
        pend = r.xpending_range(k.ready, GROUP, "-", "+", 10_000)
        out["pending"] = sorted((_s(p["consumer"]), int(p["times_delivered"])) for p in pend)
    except Exception:  # noqa: BLE001 - no group yet
        out["pending"] = []
    return out


def places(r: Any, k: QueueKeys, run_id: str) -> list[str]:
    """Every place a run is found in: delayed, ready, dead, done. Invariant 1 wants one."""
    found = []
    if run_id in dict(delayed.runs(r, k)):
        found.append("delayed")
    for name in ("ready", "dead"):
        key = getattr(k, name)
        if r.exists(key) and any(f.get(b"run_id") == run_id.encode() for _, f in r.xrange(key)):
            found.append(name)
    if r.zscore(k.done, run_id) is not None:
        found.append("done")
    return found


# -- the delayed set (key layout 3: a B-tree of small ZSETs, lua/lib/btree.lua) ----------------


def delayed_ids(r: Any, k: QueueKeys) -> list[str]:
    """Run ids in the delayed set, earliest first."""
    return [rid for rid, _ in delayed.runs(r, k)]


def delayed_due(r: Any, k: QueueKeys, run_id: str) -> int | None:
    """The due time of a run in the delayed set, or None if it is not there."""
    return dict(delayed.runs(r, k)).get(run_id)


def delayed_count(r: Any, k: QueueKeys) -> int:
    """Runs in the delayed set, as the scripts count them (checked against the leaves)."""
    n = int(r.hget(k.delayed, "n") or 0)
    assert n == len(delayed.runs(r, k)), "the delayed set's count disagrees with its leaves"
    return n


_ADD = """
-- BEGIN btree
-- END btree
local ids, dues = {}, {}
for i = 1, #ARGV, 2 do ids[#ids + 1], dues[#dues + 1] = ARGV[i], tonumber(ARGV[i + 1]) end
bt_add(KEYS[1], ids, dues)
return #ids
"""


def add_delayed(r: Any, k: QueueKeys, dues: dict[str, int]) -> None:
    """Put run ids straight into the delayed set (no envelopes): for tests of readers."""
    from zsched.store.luagen import expand
    from zsched.store.scripts import lua_dir

    args = [x for rid, due in dues.items() for x in (rid, due)]
    r.eval(expand(_ADD, lua_dir() / "lib"), 1, k.delayed, *args)


def envelope_of(r: Any, k: QueueKeys, run_id: str) -> bytes | None:
    """The envelope of a live run: in `runs` after its due tag, or in its stream entry when
    `runs` holds the entry's id (a run on the stream)."""
    raw = r.hget(k.runs, run_id)
    if is_entry_id(raw):
        return entry_envelope(r.xrange(k.ready, raw, raw))
    return None if raw is None else delayed.untag(raw)[1]
