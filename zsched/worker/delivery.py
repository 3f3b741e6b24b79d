"""`Delivery`: one stream entry handed to this worker (read, or reclaimed), and its parser.

Its one home: the reader, recovery, limits and cancel all use it, none of them the Worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from zsched.protocol.keys import GROUP
from zsched.protocol.text import lossy_text
from zsched.store.replies import TAG_BYTES, entry_payload
from zsched.worker.tasks import RunInfo


@dataclass
class Delivery:
    """One stream entry handed to this worker."""

    entry_id: str
    run_id: str
    raw: bytes
    due_ms: int | None
    deliveries: int = 1
    #: Cancel support (zsched/worker/cancel.py): the asyncio task executing it, its RunInfo,
    #: whether its handler is async, and whether a cancel request was seen.
    exec_task: asyncio.Task[None] | None = None
    info: RunInfo | None = None
    is_async: bool = False
    cancel_seen: bool = False
    #: Limits (zsched/worker/limits.py): the task, the run's limit key, whether it holds a share.
    task_name: str | None = None
    limit_key: str | None = None
    limited: bool = False
    #: Read ahead past `max_read_ahead_bytes`: `raw` was dropped (ids kept, still held) and is
    #: read again when a slot comes (ReadLoop.refill).
    spilled: bool = False
    #: A sync handler's call in the thread pool (`running()` while its thread runs it).
    thread: concurrent.futures.Future[None] | None = None


#: The execute_command option that has an XREADGROUP reply come back as Redis sent it
#: (`raw_reads`, `from_reply`).
RAW = "zsched_raw"
#: The fields of an entry as the dispatch script writes them, in its order (its other shape:
#: `run_id`, `envelope` holding the run's tagged value; store.replies.entry_payload).
_RUN_ID, _ENVELOPE, _DUE_MS = b"run_id", b"envelope", b"due_ms"


def raw_reads(client: Any) -> bool:
    """Have `client` hand back an XREADGROUP reply unparsed when the call passes RAW=True, for
    `from_reply`: redis-py's parse builds a dict per entry, about half of reading's Python
    cost (BENCHMARKS.md, session 21). Every other XREADGROUP call is parsed as before. Once
    per client (a cluster client's nodes share its callbacks).

    Only for a client pinned to RESP2, as zsched's own are (store/connection.py): one that
    negotiates its protocol (a user's, with redis-py's default) gets RESP3 maps, or RESP2 on a
    server without HELLO, and redis-py picks the parse per connection. False: read parsed."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or getattr(client, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or str(kwargs.get("protocol")) != "2":
        return False
    parse = client.response_callbacks.get("XREADGROUP")
    if getattr(parse, "zsched_raw", False):
        return True

    def callback(response: Any, **options: Any) -> Any:
        if options.get(RAW):
            return response
        return parse(response, **options) if parse is not None else response

    callback.zsched_raw = True  # type: ignore[attr-defined]
    client.set_response_callback("XREADGROUP", callback)
    return True


async def read_entries(reader: Any, raw: bool, consumer: str, stream: str, count: int,
                       block_ms: int | None) -> list[Delivery]:  # fmt: skip
    """XREADGROUP of up to `count` new entries for `consumer` (waiting up to `block_ms`, None:
    no wait), as redis-py's xreadgroup sends it and refuses it (COUNT 0 would be no limit);
    its reply left unparsed (`from_reply`) when `raw` (`raw_reads` said so)."""
    if type(count) is not int or count < 1:
        raise redis.exceptions.DataError("XREADGROUP count must be a positive integer")
    if not raw:
        parsed = await reader.xreadgroup(GROUP, consumer, {stream: ">"}, count=count,
                                         block=block_ms)  # fmt: skip
        return [from_entry(eid, f) for _stream, entries in parsed or [] for eid, f in entries]
    args: list[Any] = ["XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    return from_reply(await reader.execute_command(*args, "STREAMS", stream, ">", **{RAW: True}))


def from_reply(reply: Any) -> list[Delivery]:
    """The Deliveries of an unparsed XREADGROUP reply (RESP2: [[stream, [[id, [field, value,
    ...]], ...]]], or None). Entries in either shape the dispatch script writes, fields in its
    order, take the short way; any other goes through `from_entry`."""
    out: list[Delivery] = []
    for _stream, entries in reply or ():
        for entry_id, f in entries:
            n = len(f) if f is not None else 0
            if n == 6 and f[0] == _RUN_ID and f[2] == _ENVELOPE and f[4] == _DUE_MS:
                env, due = f[3], (int(f[5]) if f[5].isdigit() else None)
            elif n == 4 and f[0] == _RUN_ID and f[2] == _ENVELOPE and type(f[3]) is bytes \
                    and f[3][:1] == b"\0" and len(f[3]) >= TAG_BYTES:  # fmt: skip
                env, due = f[3][TAG_BYTES:], int.from_bytes(f[3][1:TAG_BYTES], "big")
            else:
                pairs = f or []
                out.append(from_entry(entry_id, dict(zip(pairs[::2], pairs[1::2], strict=False))))
                continue
            run_id = f[1]
            # lossy_text inlined for the bytes Redis sends (a call each is ~2 % of a run)
            out.append(Delivery(
                entry_id.decode("utf-8", "replace") if type(entry_id) is bytes
                else lossy_text(entry_id),
                run_id.decode("utf-8", "replace") if type(run_id) is bytes
                else lossy_text(run_id),
                env, due))  # fmt: skip
    return out


def from_entry(entry_id: Any, fields: dict[bytes, bytes]) -> Delivery:
    """The Delivery of one XREADGROUP entry (fields as the dispatch script wrote them, in
    either shape: store.replies.entry_payload)."""
    env, due = entry_payload(fields)
    return Delivery(lossy_text(entry_id), lossy_text(fields.get(b"run_id", b"")), env, due)
