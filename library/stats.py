"""The statistics every result is reported with: a Wilson interval for an accuracy, and a
paired bootstrap interval for the difference of two accuracies on the same questions.

Pure Python, no dependencies: the training side, the video and the demo page all use it.
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for k successes out of n (95% for z=1.96).

    Unlike the normal approximation it stays inside [0, 1] and is sensible at k=0 or k=n.

    >>> [round(x, 4) for x in wilson_interval(8, 10)]
    [0.4902, 0.9433]
    >>> [round(x, 4) for x in wilson_interval(0, 20)]
    [0.0, 0.1611]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: Sequence[float], z: float = 1.96) -> list[float]:
    """A normal 95% interval for the mean of ``values``, rounded (zero width for one value,
    ``[0, 0]`` for none).

    >>> mean_interval([1.0, 2.0, 3.0])
    [0.868393, 3.131607]
    """
    n = len(values)
    if n == 0:
        return [0.0, 0.0]
    m = sum(values) / n
    if n < 2:
        return [round(m, 6), round(m, 6)]
    half = z * math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) / math.sqrt(n)
    return [round(m - half, 6), round(m + half, 6)]


def paired_difference(correct_a: Sequence[bool], correct_b: Sequence[bool], *, n_boot: int = 2000, seed: int = 0,
                      confidence: float = 0.95) -> dict[str, Any]:
    """Accuracy of b minus a over the same questions (position i is one question in both), with
    a paired bootstrap interval (questions resampled with replacement, seeded).

    >>> r = paired_difference([True] * 5 + [False] * 15, [True] * 15 + [False] * 5)
    >>> r["accuracy_a"], r["accuracy_b"], r["diff"], r["ci"][0] > 0, r["discordant"]
    (0.25, 0.75, 0.5, True, {'a_only': 0, 'b_only': 10})
    """
    n = len(correct_a)
    if n != len(correct_b) or n == 0:
        raise ValueError(f"paired_difference needs two equally long, non-empty lists ({n} vs {len(correct_b)})")
    out = paired_difference_repeated([correct_a], [correct_b], n_boot=n_boot, seed=seed, confidence=confidence)
    return {k: out[k] for k in ("accuracy_a", "accuracy_b", "diff", "ci", "p_not_better", "discordant")}


def paired_difference_repeated(correct_a: Sequence[Sequence[bool]], correct_b: Sequence[Sequence[bool]], *,
                               n_boot: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """Accuracy of b minus a over the same questions measured at several seeds: ``correct_a[s][i]``
    is question i at seed s (one seed is :func:`paired_difference`). The questions are resampled
    (each with its difference averaged over the seeds), not the (seed, question) pairs: a question
    answered alike at three seeds is one observation, not three, so near-identical seeds do not
    narrow the interval. ``discordant`` counts (seed, question) pairs. The interval is conditional
    on these seeds' runs: the variance between seeds is not in it.

    >>> a = [[True] * 5 + [False] * 15] * 3       # three seeds that agree question by question
    >>> b = [[True] * 7 + [False] * 13] * 3
    >>> r = paired_difference_repeated(a, b)
    >>> r["diff"], r["n"], r["n_seeds"], r["ci"] == paired_difference(a[0], b[0])["ci"]
    (0.1, 20, 3, True)
    >>> r["discordant"]                           # summed over the seeds
    {'a_only': 0, 'b_only': 6}
    """
    k = len(correct_a)
    if k == 0 or k != len(correct_b):
        raise ValueError(f"paired_difference_repeated needs the same seeds on both sides ({k} vs {len(correct_b)})")
    n = len(correct_a[0])
    if n == 0 or any(len(x) != n for x in (*correct_a, *correct_b)):
        raise ValueError("paired_difference_repeated needs every seed to answer the same, non-empty questions")
    per_q = [sum((1 if correct_b[s][i] else 0) - (1 if correct_a[s][i] else 0) for s in range(k)) / k
             for i in range(n)]
    rng = random.Random(seed)
    # one seed's differences are -1, 0 or +1: exact sums of integers, as before this function existed
    boots = sorted(sum(per_q[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    tail = (1 - confidence) / 2
    lo = boots[min(n_boot - 1, int(math.floor(tail * n_boot)))]
    hi = boots[min(n_boot - 1, int(math.ceil((1 - tail) * n_boot)) - 1)]
    acc = lambda runs: sum(1 for run in runs for x in run if x) / (k * n)
    return dict(accuracy_a=acc(correct_a), accuracy_b=acc(correct_b), diff=sum(per_q) / n, ci=[lo, hi],
                p_not_better=sum(1 for d in boots if d <= 0) / n_boot, n=n, n_seeds=k,
                discordant={"a_only": sum(1 for s in range(k) for i in range(n) if correct_a[s][i] and not correct_b[s][i]),
                            "b_only": sum(1 for s in range(k) for i in range(n) if correct_b[s][i] and not correct_a[s][i])})
