"""docs/protocol.md is the contract for clients in other languages: it must not drift from
zsched/protocol/keys.py, the Lua headers, the Python wrappers or the envelope."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from sample_calls import sample_calls

from zsched.protocol import envelope as E
from zsched.protocol import keys as K
from zsched.protocol.keys import GROUP, QueueKeys
from zsched.store import scripts as S

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "protocol.md"
REDIS_TYPES = ("ZSET", "HASH", "STREAM", "STRING", "SET", "LIST", "CHANNEL")
#: Scripts a client in another language needs; each must have its own section.
CLIENT_SCRIPTS = ("enqueue", "cancel", "dispatch", "ack", "retry", "dead", "renew", "reclaim",
                  "release")  # fmt: skip
#: Attributes of QueueKeys that are not keys.
NOT_KEYS = {"queue", "partition", "tag"}


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def sections(level: int) -> dict[str, str]:
    """Heading text -> body up to the next heading of the same or a higher level."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in doc().splitlines():
        m = re.match(r"(#+) (.*)", line)
        if m and len(m[1]) <= level:
            current = m[2].strip() if len(m[1]) == level else None
            if current is not None:
                out[current] = ""
            continue
        if current is not None:
            out[current] += line + "\n"
    return out


def redis_type(text: str) -> str | None:
    m = re.search(r"\b(" + "|".join(REDIS_TYPES) + r")\b", text)
    return m[1] if m else None


def declared_keys() -> dict[str, str]:
    """Every key of QueueKeys -> the Redis type keys.py documents for it."""
    src = inspect.getsource(K)
    comments = {m[2]: m[1] for m in re.finditer(r"#:\s*(.+)\n\s+(\w+): str = field", src)}
    out: dict[str, str] = {}
    for f in dataclasses.fields(QueueKeys):
        if f.name in NOT_KEYS:
            continue
        kind = redis_type(comments.get(f.name, ""))
        assert kind, f"keys.py: QueueKeys.{f.name} needs a '#: <TYPE> ...' comment"
        out[f.name] = kind
    for name, fn in vars(QueueKeys).items():
        if name.startswith("_") or not inspect.isfunction(fn) or not fn.__doc__:
            continue
        first = fn.__doc__.split()[0].strip(",.:")
        if first in REDIS_TYPES:  # a per-rule key builder such as lease(schedule_id)
            params = list(inspect.signature(fn).parameters)[1:]
            out[f"{name}({', '.join(params)})"] = first
    return out


def doc_key_rows() -> dict[str, tuple[str, str]]:
    body = sections(2)["Keys of a queue"]
    rows = re.findall(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*([A-Z]+)\s*\|", body, re.M)
    return {attr: (key, kind) for attr, key, kind in rows}


def key_name(attr: str, k: QueueKeys) -> str:
    m = re.fullmatch(r"(\w+)\((\w+)\)", attr)
    return getattr(k, m[1])(f"<{m[2]}>") if m else getattr(k, attr)


def test_every_key_of_queuekeys_is_documented_with_its_name_and_type() -> None:
    rows, k = doc_key_rows(), QueueKeys("q")
    for attr, kind in declared_keys().items():
        assert attr in rows, f"docs/protocol.md does not document key {attr}"
        assert rows[attr] == (key_name(attr, k), kind), f"key {attr} drifted from keys.py"


def test_the_doc_documents_no_key_that_keys_py_lacks() -> None:
    assert set(doc_key_rows()) <= set(declared_keys())


def test_the_documented_hash_tag_group_and_partition_layout_hold() -> None:
    text = doc()
    assert QueueKeys("q", 3).delayed in text
    m = re.search(r"consumer group of the ready stream is always named \*\*`(\w+)`\*\*", text)
    assert m and m[1] == GROUP


def lua_header(name: str) -> str:
    lines = []
    for line in S.source(name).splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def script_sections() -> dict[str, str]:
    return {h[:-4]: body for h, body in sections(3).items() if h.endswith(".lua")}


DOCUMENTED = sorted(script_sections())


def test_every_script_a_client_needs_is_documented() -> None:
    assert set(CLIENT_SCRIPTS) <= set(DOCUMENTED)


def test_every_script_named_in_the_doc_exists_and_has_a_section() -> None:
    named = set(re.findall(r"\b(\w+)\.lua\b", doc()))
    assert named <= set(DOCUMENTED), f"scripts named without a section: {named - set(DOCUMENTED)}"
    for name in named:
        assert (S.lua_dir() / f"{name}.lua").exists(), f"{name}.lua is named but does not exist"


def positions(text: str, kind: str) -> list[int]:
    return sorted({int(n) for n in re.findall(kind + r"\[(\d+)\]", text)})


@pytest.mark.parametrize("name", DOCUMENTED)
def test_documented_keys_match_the_lua_header(name: str) -> None:
    header, section = lua_header(name), script_sections()[name]
    assert positions(section, "KEYS") == positions(header, "KEYS"), f"{name}.lua KEYS count"
    in_header = dict(re.findall(r"KEYS\[(\d+)\]\s+(\w+)", header))
    in_doc = dict(re.findall(r"\|\s*KEYS\[(\d+)\]\s*\|\s*`(\w+)`", section))
    assert in_doc == in_header, f"{name}.lua: the doc names other keys than the header"


@pytest.mark.parametrize("name", DOCUMENTED)
def test_documented_argv_match_the_lua_header(name: str) -> None:
    header, section = lua_header(name), script_sections()[name]
    assert positions(section, "ARGV") == positions(header, "ARGV"), f"{name}.lua ARGV"
    variadic = re.compile(r"ARGV\[(\d+)\.\.\]")
    assert set(variadic.findall(section)) == set(variadic.findall(header)), f"{name}.lua batch"


@pytest.mark.parametrize("name", [n for n in DOCUMENTED if n in S.NAMES])
def test_documented_keys_are_the_ones_the_python_wrapper_passes(name: str) -> None:
    k = QueueKeys("h")
    by_name = {getattr(k, f): f for f in declared_keys() if "(" not in f}
    by_name.update({k.ledger("s"): "ledger", k.lease("s"): "lease"})  # per-rule keys
    by_name[k.cancel_request("s@2026-01-01T00:00:00Z")] = "cancel_request"  # a per-run key
    by_name.update(
        {
            k.limit_holders("t"): "limit_holders",
            k.limit_bucket("t"): "limit_bucket",
            k.limit_waiting("t"): "limit_waiting",
        }
    )  # per-task keys
    passed = [by_name[key] for key in sample_calls(k)[name].keys]
    in_doc = re.findall(r"\|\s*KEYS\[\d+\]\s*\|\s*`(\w+)`", script_sections()[name])
    assert in_doc == passed


def envelope_rows() -> dict[str, str]:
    body = sections(2)["The run envelope"]
    return dict(re.findall(r"^\|\s*`(\w+)`\s*\|\s*([a-z]+)\s*\|", body, re.M))


def test_every_envelope_field_is_documented_with_its_msgpack_type() -> None:
    # Every optional field set, none at its default (a default is left out of the encoding).
    full = E.Envelope("r", "t", None, 2, 1, 1, 2, schedule_id="s", max_attempts=2, lease_ms=5)
    fields = full.as_fields()
    rows = envelope_rows()
    assert set(rows) == set(fields)
    kinds = {"str": str, "int": int, "any": object}
    for name, value in fields.items():
        assert rows[name] in kinds, f"envelope field {name}: unknown type {rows[name]}"
        if value is not None:
            assert isinstance(value, kinds[rows[name]]), f"field {name} is not {rows[name]}"


def test_documented_version_and_limits_match_the_envelope_module() -> None:
    text = doc()
    m = re.search(r"Protocol version\s+\*\*(\d+)\*\*", text)
    assert m and int(m[1]) == E.VERSION
    body = sections(2)["The run envelope"]
    assert re.search(rf"`run_id` \| str \| yes \| 1\.\.{E.MAX_RUN_ID_BYTES} bytes", body)
    assert re.search(rf"`task` \| str \| yes \| 1\.\.{E.MAX_TASK_BYTES} bytes", body)
