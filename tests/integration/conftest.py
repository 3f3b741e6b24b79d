"""Fixtures of the integration tests shared by several files."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[2] / "examples" / "node"
# Test modules in the room folders below import procs.py from here.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def node_dir() -> Path:
    """examples/node with its npm dependencies installed (npm ci, once per package-lock)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail("node and npm are required for the cross-language tests (install Node.js 20)")
    digest = hashlib.sha1((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    stamp = NODE_DIR / "node_modules" / ".zsched-installed"
    where = hashlib.sha1(bytes(NODE_DIR)).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"zsched-npm-{where}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test processes install once
        if not (stamp.exists() and stamp.read_text() == digest):
            r = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if r.returncode != 0:
                pytest.fail(
                    "`npm ci` in examples/node failed, so the Node.js client cannot be tested "
                    f"(is the npm registry reachable?):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
                )
            stamp.write_text(digest)
    return NODE_DIR
