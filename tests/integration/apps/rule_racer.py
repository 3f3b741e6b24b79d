"""A dispatcher process whose clock is a Redis key the test moves (for replica races)."""

from __future__ import annotations

import asyncio
import sys

import redis

import zsched


class KeyClock:
    def __init__(self, r: redis.Redis, key: str) -> None:
        self.r, self.key = r, key

    def now_ms(self) -> int:
        return int(self.r.get(self.key))


async def main(url: str, queue: str) -> None:
    r = redis.Redis.from_url(url)
    app = zsched.App(url, queue=queue, clock=KeyClock(r, f"test:{queue}:clock"))
    d = app.dispatcher()
    conflicts = 0
    while not r.exists(f"test:{queue}:stop"):
        await d.tick()
        conflicts = d.parts[0].conflicts
        await asyncio.sleep(0)
    r.incrby(f"test:{queue}:conflicts", conflicts)
    await d.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
