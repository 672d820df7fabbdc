"""Small statistics without SciPy: Pearson's chi-square (goodness of fit and two samples),
its survival function from torch's regularised incomplete gamma, total variation,
frequencies. The distribution check uses them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ChiSquare:
    """A chi-square test: statistic, degrees of freedom and the p-value P(X >= statistic)."""

    statistic: float
    dof: int
    p_value: float

    @property
    def p_text(self) -> str:
        """The p-value as the check prints it."""
        return f"{self.p_value:.3g}"


def chi2_sf(x: float, dof: int) -> float:
    """Survival function of the chi-square distribution: the regularized Q(dof/2, x/2)."""
    if math.isinf(x):
        return 0.0
    if dof <= 0:
        return 1.0 if x <= 0 else 0.0
    if x <= 0:
        return 1.0
    a = torch.tensor(dof / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(a, torch.tensor(x / 2.0, dtype=torch.float64)))


def goodness_of_fit(counts: Sequence[int], probs: Sequence[float]) -> ChiSquare:
    """Pearson's test of observed counts against exact bin probabilities (summing to 1).

    A bin with probability 0 that was observed makes the statistic infinite (p-value 0): an
    impossible outcome happened. Empty bins with probability 0 are dropped.
    """
    n = sum(counts)
    stat, bins = 0.0, 0
    for c, p in zip(counts, probs, strict=True):
        if p <= 0.0:
            if c > 0:
                return ChiSquare(math.inf, max(bins, 1), 0.0)
            continue
        e = n * p
        stat += (c - e) ** 2 / e
        bins += 1
    dof = bins - 1
    return ChiSquare(stat, dof, chi2_sf(stat, dof))


def two_sample(a: Sequence[int], b: Sequence[int]) -> ChiSquare:
    """Chi-square test of homogeneity of two count vectors over the same bins."""
    na, nb = sum(a), sum(b)
    if na == 0 or nb == 0:
        return ChiSquare(0.0, 0, 1.0)
    stat, bins = 0.0, 0
    for ca, cb in zip(a, b, strict=True):
        total = ca + cb
        if total == 0:
            continue
        ea, eb = total * na / (na + nb), total * nb / (na + nb)
        stat += (ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb
        bins += 1
    dof = bins - 1
    return ChiSquare(stat, dof, chi2_sf(stat, dof))


def total_variation(p: Sequence[float], q: Sequence[float]) -> float:
    """0.5 * sum |p - q| over the same bins."""
    return 0.5 * sum(abs(a - b) for a, b in zip(p, q, strict=True))


def frequencies(counts: Sequence[int]) -> list[float]:
    """Counts divided by their sum (all zeros when there are none)."""
    n = sum(counts)
    return [c / n if n else 0.0 for c in counts]
