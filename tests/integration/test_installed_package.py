"""zsched as a user gets it: the sdist and the wheel, built and installed into fresh venvs
outside the repository, then driven from a folder outside the repository.

Every other test imports the editable install of the source tree, which hid a wheel that
could not read its own Lua scripts. This one runs the installed console script and package:
a delayed run and a rule fire execute through `zsched dispatcher` and `zsched worker`, the
shell and Node clients enqueue with the installed .lua files, and `zsched --help` and
`zsched status` answer. The wheel is built from the sdist (`python -m build`), so a file
missing from the sdist breaks this test too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)

USER_APP = """
import os
from pathlib import Path

import zsched

app = zsched.App(os.environ["ZSCHED_REDIS_URL"], queue="smoke")
OUT = Path(os.environ["SMOKE_OUT"])


@app.task(name="hello")
def hello(payload):
    run = zsched.current_run()
    name = run.run_id.replace("/", "_").replace(":", "_")
    (OUT / name).write_text(repr(payload))
"""

USER_CALLS = """
from datetime import timedelta
from myapp import app

print(app.enqueue("hello", {"who": "package"}, delay=timedelta(milliseconds=300), run_id="pkg-1"))
print(app.schedule("tick", "hello", every=1, payload={"who": "rule"}))
"""


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400, **kw)  # type: ignore[call-overload]
    assert r.returncode == 0, (
        f"{cmd} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel built from it, as `python -m build` makes them."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], cwd=out)
    (sdist,) = out.glob("zsched-*.tar.gz")
    (wheel,) = out.glob("zsched-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _fresh_venv(where: Path, dist: Path) -> Path:
    _run([sys.executable, "-m", "venv", str(where)])
    _run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", str(dist)], cwd=where)
    return where / "bin"


def _clean_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH into the repo, the venv first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def test_the_wheel_ships_every_lua_script_and_its_shared_blocks(dists: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    for lua in (REPO / "lua").rglob("*.lua"):
        rel = lua.relative_to(REPO / "lua").as_posix()
        assert f"zsched/lua/{rel}" in names, f"the wheel lacks zsched/lua/{rel}"
    assert "zsched/py.typed" in names
    packages = {p.parent.as_posix() for p in REPO.glob("zsched/**/__init__.py")}
    for pkg in packages:
        rel = Path(pkg).relative_to(REPO).as_posix()
        assert f"{rel}/__init__.py" in names, f"the wheel lacks the package {rel}"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_package_runs_a_delayed_run_and_a_rule_fire_outside_the_repo(
    kind: str,
    dists: dict[str, Path],
    server: RedisServer,
    tmp_path: Path,
    node_dir: Path,
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", dists[kind])
    home = tmp_path / "user"
    out = home / "out"
    out.mkdir(parents=True)
    (home / "myapp.py").write_text(USER_APP)
    queue_url = server.url.replace("/0", f"/{1 if kind == 'wheel' else 2}")
    env = _clean_env(bin_dir, ZSCHED_REDIS_URL=queue_url, SMOKE_OUT=str(out), PYTHONPATH=str(home))
    py = str(bin_dir / "python")

    where = _run([py, "-c", "import zsched, zsched.store.scripts as s; print(zsched.__file__); "
                  "print(s.lua_dir())"], cwd=home, env=env).stdout.split()  # fmt: skip
    assert str(tmp_path / "venv") in where[0], f"imported {where[0]}, not the installed package"
    lua_dir = Path(where[1])
    assert _run(["zsched", "lua-dir"], cwd=home, env=env).stdout.strip() == str(lua_dir)
    assert (lua_dir / "enqueue.lua").is_file() and (lua_dir / "lib" / "btree.lua").is_file()

    assert "dispatcher" in _run(["zsched", "--help"], cwd=home, env=env).stdout
    version = _run(["zsched", "--version"], cwd=home, env=env).stdout.split()[-1]
    assert version == _run([py, "-c", "import zsched; print(zsched.__version__)"], cwd=home,
                           env=env).stdout.strip()  # fmt: skip
    plugins = _run([py, "-c", "from importlib.metadata import entry_points; "
                    "print([e.value for e in entry_points(group='pytest11')])"],
                   cwd=home, env=env).stdout  # fmt: skip
    assert "zsched.testing.plugin" in plugins  # the testing kit's fixtures reach users' suites
    _run([py, "-c", USER_CALLS], cwd=home, env=env)
    foreign = {"ZSCHED_LUA_DIR": str(lua_dir)}
    _run([str(REPO / "examples" / "shell" / "enqueue.sh"), "--redis", queue_url, "--queue",
          "smoke", "--task", "hello", "--payload", '{"who":"shell"}', "--run-id", "sh-1"],
         cwd=home, env={**env, **foreign})  # fmt: skip
    _run(["node", str(node_dir / "enqueue.js"), "--redis", queue_url, "--queue", "smoke",
          "--task", "hello", "--payload", '{"who":"node"}', "--run-id", "node-1"],
         cwd=home, env={**env, **foreign})  # fmt: skip

    commands = {
        "dispatcher": ["zsched", "dispatcher", "--queue", "smoke", "--app", "myapp:app",
                       "--metrics-port", "0"],
        "worker": ["zsched", "worker", "myapp:app", "--queue", "smoke", "--metrics-port", "0"],
    }  # fmt: skip
    procs: dict[Path, subprocess.Popen[bytes]] = {}
    try:
        for name, cmd in commands.items():
            log = tmp_path / f"{name}.log"
            with open(log, "wb") as f:
                procs[log] = subprocess.Popen(cmd, cwd=home, env=env, stdout=f, stderr=f)
        _await_files(out, procs, lambda names: {"pkg-1", "sh-1", "node-1"} <= names
                     and any(n.startswith("tick@") for n in names))  # fmt: skip
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(timeout=30)
    assert (out / "pkg-1").read_text() == "{'who': 'package'}"
    assert (out / "node-1").read_text() == "{'who': 'node'}"
    status = json.loads(_run(["zsched", "status", "--queue", "smoke", "--json"],
                             cwd=home, env=env).stdout)  # fmt: skip
    assert status["dead"] == 0, status


def _await_files(out: Path, procs: dict[Path, subprocess.Popen[bytes]], done: object) -> None:
    """Wait until the handler has written the expected files, or a process died."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if done({p.name for p in out.iterdir()}):  # type: ignore[operator]
            return
        for log, p in procs.items():
            if p.poll() is not None:
                pytest.fail(f"{p.args} exited {p.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"runs did not execute; written: {sorted(p.name for p in out.iterdir())}")
