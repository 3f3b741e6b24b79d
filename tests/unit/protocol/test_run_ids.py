"""Fresh run ids: 20 URL-safe characters that sort by creation time (zsched.app._RunIds)."""

from __future__ import annotations

import os
import random
import re

from zsched.protocol.runids import ORDERED_ALPHABET, _RunIds, created_ms, new_run_id


def _decode(run_id: str) -> tuple[int, int]:
    digits = [ORDERED_ALPHABET.index(c) for c in run_id]
    ms = n = 0
    for d in digits[:8]:
        ms = ms * 64 + d
    for d in digits[8:]:
        n = n * 64 + d
    return ms, n


def test_the_alphabet_is_url_safe_and_in_ascii_order() -> None:
    assert list(ORDERED_ALPHABET) == sorted(ORDERED_ALPHABET) and len(set(ORDERED_ALPHABET)) == 64
    assert re.fullmatch(r"[-0-9A-Za-z_]+", ORDERED_ALPHABET)


def test_ids_sort_as_their_time_and_number_do() -> None:
    rng = random.Random(7)
    pairs = [(rng.getrandbits(48), rng.getrandbits(72)) for _ in range(5000)]
    pairs += [(0, 0), (2**48 - 1, 2**72 - 1), (1, 0), (0, 1)]
    ids = {p: new_run_id(*p) for p in pairs}
    assert all(len(i) == 20 for i in ids.values())
    assert all(_decode(i) == p and created_ms(i) == p[0] for p, i in ids.items())
    assert sorted(ids.values()) == [ids[p] for p in sorted(pairs)]


def test_one_process_hands_out_increasing_ids_across_milliseconds_and_carries() -> None:
    ids = _RunIds()
    made = [ids.next() for _ in range(20_000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    # Counting within one millisecond carries into the 19-character head every 64 ids.
    ids._ms = 2**47  # a clock far ahead: every next() counts within this millisecond
    ids._start(2**70 - 70)
    counted = [ids.next() for _ in range(200)]
    assert counted == sorted(counted) and len(set(counted)) == 200
    assert [_decode(i)[1] for i in counted] == list(range(2**70 - 69, 2**70 + 131))


def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    ids = _RunIds()
    ids.next()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, " ".join(ids.next() for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = set(os.read(read, 10_000).decode().split())
    os.waitpid(pid, 0)
    parent = {ids.next() for _ in range(50)}
    assert len(child) == 50 and not child & parent
