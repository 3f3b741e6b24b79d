"""The console's simulation of a paused rule says the rule is paused, above its
`skipped: paused` rows (docs/policies.md, "The policy simulator")."""

from __future__ import annotations

from typing import Any

from console_seed import CREDS, TOKEN
from starlette.testclient import TestClient

import zsched
from zsched.observability.metrics import Metrics
from zsched.web import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_simulation_of_a_paused_rule_says_it_is_paused(client: Any, queue: str) -> None:
    app = zsched.App(client, queue=queue, metrics=Metrics())
    app.schedule("hb", "t", every=60, misfire="skip")
    c = TestClient(create_app(zsched.App(client, queue=queue, metrics=Metrics()), environ=CREDS))
    path = f"/q/{queue}/rule?id=hb&from=2030-01-01T00:00&to=2030-01-01T00:05"
    body = c.get(path, headers=AUTH).text
    assert 'id="sim"' in body and 'id="sim-paused"' not in body
    app.pause_schedule("hb", note="db migration", by="ops")
    body = c.get(path, headers=AUTH).text
    assert 'id="sim-paused"' in body and "it fires nothing while paused" in body
    rows = body.split('id="sim"', 1)[1].split("</table>", 1)[0]
    assert rows.count("<tr>") == 12
    assert rows.count("skipped: the rule was paused by ops (db migration)") == 11
