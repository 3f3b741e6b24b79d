"""The limits of the wire contract, spelled once: what the scripts refuse and what a client in
another language must respect (docs/protocol.md). The payload default is a setting's
default, so it is spelled in config.py (the layer below) and named here."""

from __future__ import annotations

from zsched.config import DEFAULT_MAX_PAYLOAD_BYTES as DEFAULT_MAX_PAYLOAD_BYTES

#: Run ids are UTF-8 text of at most this many bytes (the scripts check it).
MAX_RUN_ID_BYTES = 512
#: Task names are UTF-8 text of 1..this many bytes.
MAX_TASK_BYTES = 256
#: Largest return value kept (bytes, msgpack-encoded), unless a task says otherwise.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024
#: Hard bound of every batched script (runs per call).
MAX_BATCH = 1000
#: The last instant a run may name (9999-12-31T23:59:59.999Z): the scripts refuse later dues,
#: and Python's datetime ends there.
MAX_INSTANT_MS = 253_402_300_799_999
#: The first instant a rule may name (0001-01-01T00:00:00Z), where datetime begins.
MIN_INSTANT_MS = -62_135_596_800_000
#: Longest duration a rule or a retry may name: 1000 years (of 365.25 days), in ms.
MAX_DURATION_MS = 1000 * 31_557_600_000
#: Longest note of a queue's pause (UTF-8 bytes, stored in its control hash).
MAX_PAUSE_NOTE_BYTES = 500
