"""McNemar's exact test, the paired bootstrap and percentiles, against hand-computed values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mma2a.eval.stats import bootstrap_ci, discordant, mcnemar_exact, percentile


def test_mcnemar_exact_matches_the_binomial_tail():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 2 * P(X <= 0), X ~ Bin(5, 1/2)
    assert mcnemar_exact(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert mcnemar_exact(2, 8) == mcnemar_exact(8, 2)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(17, 0) == pytest.approx(2 / 2 ** 17)


@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_is_a_probability_and_symmetric(b, c):
    p = mcnemar_exact(b, c)
    assert 0 < p <= 1 and p == mcnemar_exact(c, b)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError, match="discordant counts must be non-negative"):
        mcnemar_exact(-1, 2)


def test_discordant_counts_each_side():
    assert discordant([True, True, False, False], [True, False, True, False]) == (1, 1)
    assert discordant([True, True, True], [False, False, True]) == (2, 0)
    with pytest.raises(ValueError, match="paired outcomes differ in length: 2 and 1"):
        discordant([True, False], [True])


def test_bootstrap_ci_is_seeded_and_brackets_the_difference():
    a = [True] * 30 + [False] * 20
    b = [True] * 15 + [False] * 35
    lo, hi = bootstrap_ci(a, b, seed=3)
    assert (lo, hi) == bootstrap_ci(a, b, seed=3)
    assert lo < 30.0 < hi
    assert bootstrap_ci(a, a) == (0.0, 0.0)
    with pytest.raises(ValueError, match="two equally long, non-empty"):
        bootstrap_ci([], [])


def test_percentile_interpolates():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert math.isclose(percentile([0.0, 10.0], 90), 9.0)


def test_report_counts_read_as_english():
    from mma2a.eval.report import count

    assert [count(1, "task"), count(0, "task"), count(12, "task")] == ["1 task", "0 tasks", "12 tasks"]
