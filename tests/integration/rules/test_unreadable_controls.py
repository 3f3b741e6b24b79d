"""The operations that need a rule decoded (pause, resume, run now, backfill, edit) refuse an
unreadable rule (a spec this zsched cannot decode, or a corrupt state) with UnreadableRule,
`schedule <id> cannot be read: <why>`, and change nothing; removing it works. The CLI prints
that message and exits 1 (the command line was fine: no usage line, not 2)."""

from __future__ import annotations

import msgpack
import pytest

from zsched import FakeClock, UnreadableRule
from zsched.app import AsyncApp
from zsched.cli.main import main

M = 60_000
T0 = 1_800_000_000_000 // (60 * M) * (60 * M)
PARTS = ["spec", "state"]


def break_rule(app, r, part: str) -> tuple[bytes, bytes]:
    """Make rule `bad` unreadable: its spec (an unknown trigger kind, as a newer zsched's
    would look) or its state (not msgpack). Returns the stored spec and state."""
    k = app.keys
    if part == "spec":
        d = msgpack.unpackb(r.hget(k.rules, "bad"), raw=False)
        d["trigger"]["kind"] = "bogus"
        r.hset(k.rules, "bad", msgpack.packb(d, use_bin_type=True))
    else:
        r.hset(k.rule_state, "bad", b"\xc1 not msgpack")
    return r.hget(k.rules, "bad"), r.hget(k.rule_state, "bad")


@pytest.mark.parametrize("part", PARTS)
async def test_controls_of_an_unreadable_rule_name_it_and_remove_works(backend, queue, part):
    app = backend.app(queue, clock=FakeClock(T0))
    app.schedule("bad", "t", every=60)
    r = backend.sync
    stored = break_rule(app, r, part)
    why = "bogus" if part == "spec" else "state"
    start, end = T0 / 1000 - 600, T0 / 1000
    ops = [lambda: app.pause_schedule("bad"), lambda: app.resume_schedule("bad"),
           lambda: app.run_schedule_now("bad"), lambda: app.backfill("bad", start, end)]  # fmt: skip
    for op in ops:
        with pytest.raises(UnreadableRule, match=rf"^schedule bad cannot be read: .*{why}"):
            op()
    with pytest.raises(UnreadableRule, match=rf"^schedule bad cannot be edited: .*{why}"):
        app.schedule("bad", "t", every=30)
    aio = AsyncApp.from_app(app, redis=backend.async_client())
    for coro in (aio.pause_schedule("bad"), aio.resume_schedule("bad"),
                 aio.run_schedule_now("bad"), aio.backfill("bad", start, end)):  # fmt: skip
        with pytest.raises(UnreadableRule, match=r"^schedule bad cannot be read: "):
            await coro
    assert (r.hget(app.keys.rules, "bad"), r.hget(app.keys.rule_state, "bad")) == stored
    assert app.schedule_history("bad") == []
    assert await aio.unschedule("bad")  # removing it needs no reading
    await aio.redis.aclose()


@pytest.mark.parametrize("part", PARTS)
def test_the_cli_says_which_rule_cannot_be_read_and_exits_1(real, queue, part, capsys):
    app = real.app(queue)
    app.schedule("bad", "t", every=60)
    stored = break_rule(app, real.sync, part)
    conn = ["--redis", real.url, "--queue", queue]
    commands = [["next"], ["edit", "--every", "30"], ["pause"], ["resume"], ["run"],
                ["backfill", "--from", "2026-01-01T00:00Z", "--to", "2026-01-01T01:00Z"],
                ["simulate", "--down", "2026-01-01T00:00Z..2026-01-01T01:00Z"]]  # fmt: skip
    for cmd in commands:
        code = main(["schedules", cmd[0], "bad", *cmd[1:], *conn])
        out, err = capsys.readouterr()
        assert code == 1, (cmd, err)
        assert "usage:" not in err, cmd
        assert err.startswith("zsched: error: schedule bad cannot be "), (cmd, err)
    r = real.sync
    assert (r.hget(app.keys.rules, "bad"), r.hget(app.keys.rule_state, "bad")) == stored
    assert main(["schedules", "rm", "bad", *conn]) == 0
    assert r.hget(app.keys.rules, "bad") is None
