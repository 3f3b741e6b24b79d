"""Drive a worker by its passes (`Worker.tick`) in a test, instead of running its loop."""

from __future__ import annotations

from typing import Any


async def tick_until_finished(w: Any, r: Any, runs_key: str, rounds: int = 20) -> None:
    """Tick worker `w` until the `runs` hash (`runs_key`, read with the sync client `r`) is
    empty, every run finished, for at most `rounds` passes; then close `w`."""
    try:
        for _ in range(rounds):
            await w.tick()
            if r.hlen(runs_key) == 0:
                break
    finally:
        await w.close()
