from __future__ import annotations

import re
from pathlib import Path

import pytest

from zsched.protocol.keys import QueueKeys, hash_tag

ROOT = Path(__file__).resolve().parents[3]


def test_every_key_of_a_queue_carries_its_hash_tag() -> None:
    k = QueueKeys("emails")
    names = [*k.all_fixed(), k.wake, k.lease("s"), k.ledger("s")]
    assert all("{emails}" in n for n in names)
    assert len(set(names)) == len(names)


def test_partitions_have_their_own_tags() -> None:
    assert QueueKeys("q", 0).tag != QueueKeys("q", 1).tag != QueueKeys("q").tag


@pytest.mark.parametrize("bad", ["", "a{b", "c}"])
def test_queue_names_that_would_break_the_tag_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        hash_tag(bad)


def test_no_key_is_spelled_outside_keys_py() -> None:
    offenders = []
    for path in (ROOT / "zsched").rglob("*.py"):
        if path.name == "keys.py":
            continue
        if re.search(r"zsched:[^\s]", path.read_text()):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_lua_scripts_never_build_key_names() -> None:
    for path in (ROOT / "lua").glob("*.lua"):
        body = path.read_text()
        assert "zsched:" not in body.replace("zsched ", ""), path.name
