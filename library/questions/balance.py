"""Hop-balanced, seeded subsets of questions: how every eval subset, SFT set and RL pool is drawn."""

from __future__ import annotations

import random
from typing import Any, Sequence


def select_balanced(questions: Sequence[Any], n: int, seed: str) -> list:
    """``n`` questions spread evenly over hop lengths (leftovers to the shortest hops), seeded.

    Deterministic for a seed string (``random.Random`` hashes strings with SHA-512) and
    independent of the input order; the result is sorted by id.

    >>> from types import SimpleNamespace as Q
    >>> qs = [Q(id=f"q{i}", hop_len=4 + i % 2) for i in range(10)]
    >>> sorted({q.hop_len: 0 for q in select_balanced(qs, 4, "s")})
    [4, 5]
    >>> [q.hop_len for q in select_balanced(qs, 4, "s")].count(4)
    2
    """
    by_hop: dict[int, list] = {}
    for q in sorted(questions, key=lambda q: q.id):
        by_hop.setdefault(q.hop_len, []).append(q)
    if n >= len(questions):
        return sorted(questions, key=lambda q: q.id)
    rng = random.Random(seed)
    hops = sorted(by_hop)
    want = {h: 0 for h in hops}
    remaining = n
    # round-robin so that a hop with too few questions hands its share to the others
    while remaining:
        progressed = False
        for h in hops:
            if remaining and want[h] < len(by_hop[h]):
                want[h] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    chosen = []
    for h in hops:
        chosen += rng.sample(by_hop[h], want[h])
    return sorted(chosen, key=lambda q: q.id)
