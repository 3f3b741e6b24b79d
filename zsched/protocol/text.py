"""Reply fields as text. Redis answers bytes; two readings, named for what they promise.

- `text`: a field zsched wrote itself (a run id, an entry id, a cursor, a reply code's name):
  it is UTF-8, and a byte that is not is a bug worth an error.
- `lossy_text`: a field to show or compare that another client may have written (a dead
  letter's reason, a consumer name, a stats field): never raises; a bad byte becomes U+FFFD.
"""

from __future__ import annotations

from typing import Any


def text(b: Any) -> str:
    """Strict UTF-8 for bytes; str() of anything else (an int, or a str from a decoding client)."""
    return b.decode() if isinstance(b, bytes) else str(b)


def lossy_text(b: Any) -> str:
    """UTF-8 for bytes with bad bytes replaced; str() of anything else. Never raises."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)
