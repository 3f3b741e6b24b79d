"""Cap a process's CPU with a cgroup, to make one Redis master the bottleneck it is in
production when the whole cluster shares two cores here (bench/scaling.py --cap).

cgroup v1's `cpu` controller (`/sys/fs/cgroup/cpu/<group>/cpu.cfs_quota_us` over
`cpu.cfs_period_us`, the pid into `tasks`) where it is mounted, else cgroup v2's `cpu.max`
(`<quota> <period>`, the pid into `cgroup.procs`). Needs root. A cap is a ceiling, not a
share: a master capped at 5 % of a core gets at most 1 ms of CPU in every 20 ms.
"""

from __future__ import annotations

import os
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
#: The longest period; a small cap gets a shorter one (down to the 1 ms least quota): a master
#: at 5 % of a 100 ms period is frozen for 95 ms at a time, and every client round trip to it
#: then waits that long, so the clients, not the cap, would set the pace.
PERIOD_US = 100_000
MIN_QUOTA_US = 1000


class CpuCap:
    """One cgroup holding one process, capped at `percent` of one core; `remove()` undoes it."""

    def __init__(self, name: str, pid: int, percent: float) -> None:
        period = max(MIN_QUOTA_US, min(PERIOD_US, int(MIN_QUOTA_US * 100 / percent)))
        quota = max(MIN_QUOTA_US, int(period * percent / 100))
        self.v1 = (V1 / "cpu.cfs_quota_us").exists()
        root = V1 if self.v1 else V2
        self.path = root / name
        self.path.mkdir(exist_ok=True)
        if self.v1:
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
            (self.path / "tasks").write_text(str(pid))
        else:
            (self.path / "cpu.max").write_text(f"{quota} {period}")
            (self.path / "cgroup.procs").write_text(str(pid))
        self.pid, self.percent = pid, percent

    def throttled(self) -> tuple[int, float]:
        """(periods throttled, seconds throttled) so far, from cpu.stat."""
        try:
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        except OSError:
            return 0, 0.0
        if self.v1:
            return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_time", 0)) / 1e9
        return int(stat.get("nr_throttled", 0)), int(stat.get("throttled_usec", 0)) / 1e6

    def remove(self) -> None:
        """Move what is left back to the root group and delete the group."""
        procs = self.path / ("tasks" if self.v1 else "cgroup.procs")
        root = self.path.parent / ("tasks" if self.v1 else "cgroup.procs")
        try:
            for pid in procs.read_text().split():
                try:
                    root.write_text(pid)
                except OSError:
                    pass
            os.rmdir(self.path)
        except OSError:
            pass


def available() -> bool:
    """Whether this process may create capped cgroups (root, and a cpu controller)."""
    return os.geteuid() == 0 and (
        (V1 / "cpu.cfs_quota_us").exists() or (V2 / "cgroup.controllers").exists()
    )
