"""AsyncApp over TLS only, and as the ACL user of docs/security.md (nothing more allowed)."""

from __future__ import annotations

import asyncio

import test_acl
import test_tls
from test_acl import PASSWORD
from test_tls import tls_url

import zsched

# The servers of the sync tests, as fixtures of this module too.
acl_server = test_acl.acl_server
tls = test_tls.tls


async def _round(app: zsched.AsyncApp) -> None:
    await app.enqueue_many([("t", i) for i in range(150)])
    rid = await app.enqueue("t", {"x": 1}, delay=60, run_id="r1")
    assert (await app.get_run(rid)).state == "scheduled"
    assert await app.cancel("r1")
    assert (await app.status()).delayed == 150
    assert await app.schedule("every-minute", "t", every=60) == 1
    assert await app.schedule_history("every-minute") == []
    assert await app.dead_letters() == [] and await app.purge_dead() == 0
    await app.aclose()


def test_async_app_over_tls_only(tls, queue: str) -> None:
    _srv, port, certs = tls
    asyncio.run(_round(zsched.AsyncApp(tls_url(port, certs), queue)))


def test_async_app_as_the_zsched_acl_user(acl_server, queue: str) -> None:
    url = f"redis://zsched:{PASSWORD}@127.0.0.1:{acl_server.port}/0"
    asyncio.run(_round(zsched.AsyncApp(url, queue)))


def test_status_with_due_runs_works_as_the_acl_user(acl_server, queue: str) -> None:
    # status.lua counts due leaves with ZLEXCOUNT, which the documented rule set lacked.
    app = zsched.App(f"redis://zsched:{PASSWORD}@127.0.0.1:{acl_server.port}/0", queue)
    app.enqueue_many([("t", i) for i in range(5)])
    assert app.status().due == 5
    app.close()
