"""redis-py 8 speaks RESP3 by default; zsched pins RESP2 on its own clients and must also
work with a caller's client of either protocol (reply shapes differ, e.g. XREADGROUP)."""

from __future__ import annotations

import pytest
import redis

import zsched


@pytest.mark.parametrize("protocol", [2, 3])
async def test_an_app_on_a_callers_client_of_either_protocol(redis_server, queue, protocol):
    client = redis.Redis(port=redis_server.port, protocol=protocol)
    app = zsched.App(client, queue=queue)
    ran = []

    @app.task(name="t")
    def t(payload):
        ran.append(payload)

    app.enqueue("t", 1, run_id="a")
    d, w = app.dispatcher(), app.worker()
    await d.tick()
    await w.setup()
    (delivery,) = await w.reader.read(10, None)  # delivered, not finished: "running"
    st = app.get_run("a")
    assert (st.state, st.consumer, st.deliveries) == ("running", w.consumer, 1)
    assert app.status().pending == 1
    w.runner.start(delivery)
    await w.drain()
    assert ran == [1] and app.get_run("a").state == "done"
    await d.close()
    await w.close()
    client.close()


def test_zsched_clients_pin_resp2(redis_url) -> None:
    app = zsched.App(redis_url, queue="x")
    assert app.redis.connection_pool.connection_kwargs["protocol"] == 2
    app.close()
