"""mypy reads this file (tests/pyuser/test_typed_tasks.py): lines marked `# E` must be the
only type errors, each at its own line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import zsched

app = zsched.App("redis://127.0.0.1:1/0", "typing")


@dataclass
class Order:
    order_id: int
    email: str


class Ping(TypedDict):
    n: int


@app.task
def send_receipt(order: Order) -> str:
    return order.email


@app.task(name="ping", max_attempts=2)
async def ping(payload: Ping) -> None:
    return None


@app.task
def untyped(payload):  # type: ignore[no-untyped-def]
    return payload


send_receipt.enqueue(Order(1, "a@example.com"), delay=60)
send_receipt.schedule("nightly", Order(2, "b@example.com"), cron="0 3 * * *", tz="UTC")
receipt: str = send_receipt(Order(3, "c@example.com"))  # still the function
ping.enqueue({"n": 1})
untyped.enqueue("anything")
send_receipt.enqueue("not an order")  # E
send_receipt.enqueue({"order_id": 1})  # E
ping.enqueue({"n": "one"})  # E
number: int = send_receipt(Order(4, "d@example.com"))  # E
send_receipt.schedule("weekly", Ping(n=1), every=60)  # E


async def from_a_coroutine(aio: zsched.AsyncApp) -> None:
    await aio.enqueue(send_receipt, Order(5, "e@example.com"))
    await aio.enqueue("by-name", {"any": "payload"})
    await aio.enqueue(send_receipt, "not an order")  # E
