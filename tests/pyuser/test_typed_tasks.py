"""Typed task handles and declared payloads (dataclass, TypedDict, pydantic)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import msgpack
import pydantic
import pytest

import zsched
from zsched.testing import Kit

SAMPLE = Path(__file__).parent / "typing_samples" / "handles_sample.py"


@dataclass
class Address:
    city: str
    zip: str | None = None


@dataclass
class Order:
    order_id: int
    email: str
    tags: list[str] = field(default_factory=list)
    ship_to: Address | None = None


class Ping(TypedDict):
    n: int
    note: NotRequired[str]


class Invoice(pydantic.BaseModel):
    invoice_id: int
    amount: float


def _app() -> zsched.App:
    return zsched.App("redis://127.0.0.1:1/0", "typed")


def test_mypy_checks_enqueue_and_schedule_against_the_handlers_payload_type() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
         str(SAMPLE)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    marked = {i for i, line in enumerate(SAMPLE.read_text().splitlines(), 1)
              if line.endswith("# E")}  # fmt: skip
    flagged = {int(line.split(":")[1]) for line in out.stdout.splitlines() if ": error:" in line}
    assert flagged == marked, out.stdout
    assert len(marked) == 6


def test_a_handle_is_still_the_function_and_knows_its_task() -> None:
    app = _app()

    @app.task(name="receipt")
    def receipt(order: Order) -> str:
        """Send a receipt."""
        return order.email

    assert receipt(Order(1, "a@x")) == "a@x"
    assert receipt.__name__ == "receipt" and receipt.__doc__ == "Send a receipt."
    assert receipt.name == "receipt" and app.tasks["receipt"].name == "receipt"
    assert app.task(name="receipt")(receipt).fn is receipt.fn  # registering again is fine
    with pytest.raises(zsched.ZschedError, match="already registered"):
        app.task(name="receipt")(lambda p: p)


def test_a_dataclass_payload_travels_as_a_plain_map_and_comes_back_as_the_dataclass() -> None:
    app = _app()
    got = []

    @app.task(name="ship")
    def ship(order: Order) -> None:
        got.append(order)

    with Kit(app) as kit:
        order = Order(7, "a@x", ["gift"], Address("Lyon"))
        ship.enqueue(order, run_id="o7")
        raw = app.redis.hget(app.keys.runs, "o7")
        assert b"Lyon" in raw and b"Order" not in raw  # plain data on the wire
        assert [o.outcome for o in kit.drain()] == ["done"]
        assert got == [order] and isinstance(got[0].ship_to, Address)
        assert kit.enqueued() == []


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ("x", "payload must be a Order, got str"),
        (Order("7", "a@x"), "payload.order_id must be int, got str"),  # type: ignore[arg-type]
        ({"order_id": 1}, "lacks field(s) of Order: email"),
        ({"order_id": 1, "email": "e", "colour": "red"}, "unknown field(s) of Order: colour"),
        (Order(1, "e", ["ok", 3]), ""),  # list items are not checked one by one here
    ],
)
def test_a_bad_dataclass_payload_is_refused_at_enqueue_naming_the_field(payload, says) -> None:
    app = _app()
    ship = app.task(name="ship")(lambda order: None)
    app.task(name="ship2", payload=Order)(lambda order: None)
    assert ship.codec is None  # a lambda declares nothing
    with Kit(app):
        if not says:
            app.enqueue("ship2", payload)
            return
        with pytest.raises(zsched.PayloadError, match=says.replace("(", r"\(").replace(")", r"\)")):
            app.enqueue("ship2", payload)  # by name too: the App knows the declared type


def test_a_typed_dict_payload_is_checked_and_stays_a_dict() -> None:
    app = _app()
    got = []

    @app.task(name="ping")
    async def ping(payload: Ping) -> None:
        got.append(payload)

    with Kit(app) as kit:
        ping.enqueue({"n": 1})
        ping.enqueue({"n": 2, "note": "hi"})
        with pytest.raises(zsched.PayloadError, match="payload.n must be int, got str"):
            ping.enqueue({"n": "one"})  # type: ignore[typeddict-item]
        with pytest.raises(zsched.PayloadError, match="lacks key"):
            ping.enqueue({})  # type: ignore[typeddict-item]
        kit.drain()
        assert sorted(got, key=lambda p: p["n"]) == [{"n": 1}, {"n": 2, "note": "hi"}]


def test_a_pydantic_model_payload_is_validated_and_rebuilt() -> None:
    app = _app()
    got = []

    @app.task(name="bill")
    def bill(invoice: Invoice) -> None:
        got.append(invoice)

    with Kit(app) as kit:
        bill.enqueue(Invoice(invoice_id=1, amount=9.5))
        with pytest.raises(zsched.PayloadError, match="not a valid Invoice"):
            app.enqueue("bill", {"invoice_id": "x", "amount": 1})
        kit.drain()
        assert got == [Invoice(invoice_id=1, amount=9.5)]


def test_a_payload_that_fails_the_check_at_the_worker_is_a_dead_letter_with_the_error() -> None:
    app = _app()

    @app.task(name="ship")
    def ship(order: Order) -> None:
        raise AssertionError("not reached")

    with Kit(app) as kit:
        # Another client (or an older version of Order) wrote a map the type refuses.
        other = zsched.App(app.redis, app.queue, clock=kit.clock)
        other.enqueue("ship", {"order_id": "seven", "email": "a@x"}, run_id="foreign")
        (outcome,) = kit.drain()
        assert outcome.outcome == "dead"
        (letter,) = kit.dead_letters()
        assert letter.reason == ("failed: invalid payload: payload.order_id must be int, got str")


def test_rules_of_a_typed_task_carry_the_plain_payload() -> None:
    app = _app()
    ship = app.task(name="ship")(_typed_ship)
    with Kit(app) as kit:
        ship.schedule("hourly", Order(1, "h@x"), every=3600)
        run_id = kit.run_schedule_now("hourly")
        (queued,) = kit.enqueued()
        assert queued.run_id == run_id and queued.payload == {
            "order_id": 1, "email": "h@x", "tags": [], "ship_to": None,
        }  # fmt: skip
        assert msgpack.packb(queued.payload)  # plain data
        assert [o.outcome for o in kit.drain()] == ["done"]


def _typed_ship(order: Order) -> None:
    assert isinstance(order, Order)


async def test_async_app_enqueues_a_handle_with_its_declared_payload(real, queue) -> None:
    app = zsched.App(real.url, queue)
    ship = app.task(name="ship")(_typed_ship)
    async with app.aio() as aio:
        rid = await aio.enqueue(ship, Order(9, "z@x"), run_id="a9")
        assert rid == "a9" and (await aio.get_run("a9")).task == "ship"
        with pytest.raises(zsched.PayloadError, match="must be a Order"):
            await aio.enqueue(ship, "nope")  # type: ignore[arg-type]
    app.close()


def test_a_handle_of_an_async_handler_reads_as_a_coroutine_function() -> None:
    import asyncio
    import inspect

    app = _app()

    @app.task(name="a")
    async def a(payload: Ping) -> None:
        return None

    @app.task(name="s")
    def s(payload: Ping) -> None:
        return None

    assert asyncio.iscoroutinefunction(a) and not asyncio.iscoroutinefunction(s)
    if sys.version_info >= (3, 12):
        assert inspect.iscoroutinefunction(a)
    assert app.tasks["a"].is_async and not app.tasks["s"].is_async
    assert app.task(name="a2")(a).fn is a.fn and app.tasks["a2"].is_async  # a handle again


def test_a_handle_declares_a_rule_with_its_plain_payload() -> None:
    app = _app()
    ship = app.task(name="ship")(_typed_ship)
    ship.declare("daily", Order(3, "d@x"), cron="0 6 * * *", tz="UTC")
    assert app.declared["daily"]["payload"] == {"order_id": 3, "email": "d@x", "tags": [],
                                                "ship_to": None}  # fmt: skip
    with pytest.raises(zsched.PayloadError):
        ship.declare("bad", "nope")  # type: ignore[arg-type]
    with Kit(app) as kit:  # the kit syncs declared rules, as a dispatcher does
        assert kit.run_schedule_now("daily").startswith("daily@")
        assert [o.outcome for o in kit.drain()] == ["done"]
