"""Every Lua file starts with its contract, and the Python wrapper agrees with it."""

from __future__ import annotations

import re

import pytest
from sample_calls import sample_calls

from zsched.protocol.keys import QueueKeys
from zsched.store import scripts as S

K = QueueKeys("h")
SAMPLE_CALLS = sample_calls(K)


def header(name: str) -> str:
    lines = []
    for line in S.source(name).splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_every_lua_file_has_a_wrapper_and_a_sample() -> None:
    files = sorted(p.stem for p in S.lua_dir().glob("*.lua"))
    assert set(S.NAMES) <= set(files)
    assert set(SAMPLE_CALLS) == set(S.NAMES)


@pytest.mark.parametrize("name", S.NAMES)
def test_header_names_the_verb_returns_invariant_and_bound(name: str) -> None:
    h = header(name)
    assert h.startswith(f"-- {name}: ")
    for part in ("Returns", "Invariant:", "Bound:"):
        assert part in h, f"{name}.lua header lacks {part}"


@pytest.mark.parametrize("name", S.NAMES)
def test_header_keys_match_the_wrapper(name: str) -> None:
    declared = sorted({int(n) for n in re.findall(r"KEYS\[(\d+)\]", header(name))})
    call = SAMPLE_CALLS[name]
    assert declared == list(range(1, len(call.keys) + 1))


@pytest.mark.parametrize("name", S.NAMES)
def test_header_argv_match_the_wrapper(name: str) -> None:
    h = header(name)
    fixed = sorted({int(n) for n in re.findall(r"ARGV\[(\d+)\]", h)})
    assert fixed == list(range(1, len(fixed) + 1))
    # The wrapper passes exactly the fixed arguments when given an empty batch.
    assert len(SAMPLE_CALLS[name].args) == len(fixed)


@pytest.mark.parametrize("name", S.NAMES)
def test_body_names_keys_and_argv_once_at_the_top(name: str) -> None:
    # The shared blocks (lua/lib) come between the header and the script's own code.
    body = re.sub(r"^-- BEGIN (\w+).*?^-- END \1\n", "", S.source(name), flags=re.S | re.M)
    code = [line for line in body.split("\n") if not line.startswith("--")]
    uses = [i for i, line in enumerate(code) if "KEYS[" in line]
    assert uses and max(uses) < 3, f"{name}.lua indexes KEYS in its body"


def _code(name: str) -> str:
    """A script's code without its header comment, its own name in messages neutralised."""
    code = [line for line in S.source(name).splitlines() if not line.startswith("--")]
    return "\n".join(code).replace(f"zsched {name}:", "zsched <script>:")


@pytest.mark.parametrize(("alias", "name"), sorted(S.ALIASES.items()))
def test_an_alias_file_is_the_same_script_as_the_one_it_names(alias: str, name: str) -> None:
    # Lua files are public API: a client that loads the old name runs what the new one does.
    assert name in S.NAMES and alias not in S.NAMES
    assert _code(alias) == _code(name)
    h = header(alias)
    assert h.startswith(f"-- {alias}: the former name of {name}.lua")
    for part in ("Returns", "Invariant:", "Bound:"):
        assert part in h, f"{alias}.lua header lacks {part}"


@pytest.mark.parametrize(("alias", "name"), sorted(S.ALIASES.items()))
def test_an_alias_header_declares_the_keys_and_argv_of_the_script_it_names(
    alias: str, name: str
) -> None:
    # The code is equal (above); its contract lines must be too, or a client reading the
    # alias's header calls it with the wrong KEYS or ARGV.
    def contract(n: str) -> list[str]:
        return [line for line in header(n).splitlines() if re.match(r"-- (KEYS|ARGV)\[", line)]

    assert contract(alias) and contract(alias) == contract(name)
