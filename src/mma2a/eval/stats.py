"""Paired statistics for two arms scored on the same tasks: McNemar's exact test, a paired
bootstrap confidence interval of the difference, and percentiles. Pure Python, seeded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


def discordant(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """(tasks only `a` solved, tasks only `b` solved)."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    return sum(1 for x, y in zip(a, b) if x and not y), sum(1 for x, y in zip(a, b) if y and not x)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p: the binomial test of min(b, c) among b + c discordant pairs at 1/2."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail: float = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap_ci(a: Sequence[bool], b: Sequence[bool], *, resamples: int = 10000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile CI of mean(a) - mean(b) in percentage points, resampling tasks (pairs) with replacement."""
    n = len(a)
    if n != len(b) or n == 0:
        raise ValueError("bootstrap needs two equally long, non-empty outcome lists")
    diffs = [int(x) - int(y) for x, y in zip(a, b)]
    rng = random.Random(seed)
    stats = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    alpha = (1 - level) / 2
    lo = stats[int(math.floor(alpha * (resamples - 1)))]
    hi = stats[int(math.ceil((1 - alpha) * (resamples - 1)))]
    return round(lo * 100, 1), round(hi * 100, 1)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
