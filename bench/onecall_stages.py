"""Where one-call enqueue's instructions go, stage by stage: `python -m bench.onecall_stages`.

Under callgrind (bench.instructions), one redis-server gets copies of enqueue.lua cut short
after each stage (a `do return {1} end` inserted before the first line of the next), plus a
script that is only `return 1` (what any EVALSHA with these 5 keys and 7 arguments costs) and
one that is only the 7 commands a one-call enqueue runs. Each variant enqueues `--n` single
runs, one call each, after the rightmost run of a tree of 2,000 (as `bench.instructions`'s
one-call row), round after round interleaved; medians per variant and each stage's share are
printed. `--lua DIR` cuts DIR/enqueue.lua instead. BENCHMARKS.md, "Session 17".
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from pathlib import Path

from zsched.store.replies import tag

from .common import now_ms, payload
from .instructions import callgrind_server

# (stage name, the line that starts the next stage): the copy cut before that line runs the
# stages up to this one.
STAGES = [
    ("B-tree block (its closures)", "local delayed, runs, done, stats, wake = KEYS[1]"),
    ("arguments and helpers", "local n = nargs / 4"),
    ("validation of the run", "local live, done_at"),
    ("dedupe: ZMSCORE done, HSETNX runs", "local dups = n - added"),
    ("bt_add and HINCRBY stats (5 commands)", "if dups > 0 then"),
]

RETURN_1 = "return 1"
# The commands of a one-call enqueue into a leaf that is not full, with none of the logic.
COMMANDS_ONLY = r"""
local d = KEYS[1]
redis.call('ZMSCORE', KEYS[3], ARGV[4])
redis.call('HSETNX', KEYS[2], ARGV[4], ARGV[7])
redis.call('HINCRBY', KEYS[4], 'enqueued', '1')
local k = '[' .. string.format('%015d', ARGV[5]) .. ARGV[4] .. '\0\0\255'
local f = redis.call('ZRANGE', d .. ':index', k, '-', 'BYLEX', 'REV', 'LIMIT', '0', '2')
redis.call('HINCRBY', d, 'n', '1')
local leaf = d .. ':leaf:' .. string.sub(f[1], (string.find(f[1], '\0\0', 16, true)) + 2)
redis.call('ZCARD', leaf)
redis.call('ZADD', leaf, ARGV[5], ARGV[4])
return {1}
"""


def variants(src: str) -> list[tuple[str, str]]:
    """(label, script): `return 1`, each stage's cut copy, the whole script, commands only."""
    out = [("EVALSHA of `return 1`", RETURN_1)]
    for name, nxt in STAGES:
        at = src.index("\n" + nxt) + 1
        out.append((f"up to: {name}", src[:at] + "do return {1} end\n" + src[at:]))
    out += [("the whole script", src), ("the 7 commands alone", COMMANDS_ONLY)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lua", default=None, help="cut DIR/enqueue.lua")
    ap.add_argument("--n", type=int, default=500, help="one-call enqueues per variant a round")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from zsched.protocol.envelope import Envelope
    from zsched.protocol.keys import QueueKeys
    from zsched.store import scripts as S

    lua = Path(a.lua) if a.lua else S.lua_dir()
    src = (lua / "enqueue.lua").read_text()
    k = QueueKeys("i")
    keys = [k.delayed, k.runs, k.done, k.stats, k.wake]
    base = now_ms() + 3_600_000

    def env(at: int, i: int) -> bytes:
        e = Envelope(uuid.uuid4().hex, "noop", payload(at, i), at, at, at).encode()
        return tag(at, e)

    with (
        tempfile.TemporaryDirectory(prefix="zsched-cg-") as out,
        callgrind_server(out) as (r, cost),
    ):
        whole = r.script_load(src)
        for s in range(0, 2000, 500):  # the tree the runs join, all due before them
            args: list[object] = []
            for i in range(s, s + 500):
                args += [uuid.uuid4().hex, base + i, "noop", env(base + i, i)]
            r.evalsha(whole, 5, *keys, "", 86_400_000, 1 << 20, *args)
        got: dict[str, list[float]] = {}
        shas = [(label, r.script_load(text)) for label, text in variants(src)]
        at = base + 10_000
        for rnd in range(a.rounds):
            for label, sha in shas:
                runs = [(uuid.uuid4().hex, at + i, env(at + i, i)) for i in range(a.n)]
                at += a.n
                cost()
                for rid, due, e in runs:
                    r.evalsha(sha, 5, *keys, "", 86_400_000, 1 << 20, rid, due, "noop", e)
                got.setdefault(label, []).append(cost()[0] / a.n)
            print(f"round {rnd + 1} of {a.rounds} done", flush=True)
    prev = 0.0
    for label, _ in shas:
        med = statistics.median(got[label])
        step = "" if label.startswith(("EVALSHA", "the 7")) else f"  (+{med - prev:,.0f})"
        print(f"{label:<52} {med:>10,.0f} instructions/run{step}")
        if not label.startswith("the 7"):
            prev = med


if __name__ == "__main__":
    main()
