"""Small statistics without SciPy: Pearson's chi-square (goodness of fit and two samples,
and the pooled goodness of fit of outcome counts against a known distribution), its
survival function from torch's regularised incomplete gamma, its critical value, total
variation, frequencies. The distribution check, the distribution tests and the power
calculation behind their sample sizes use them."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
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
    """Pearson's test of observed counts against the bins' known probabilities (summing to 1).

    A bin with probability 0 that was observed makes the statistic infinite (p-value 0): an
    impossible outcome happened. Empty bins with probability 0 are dropped.
    """
    n = sum(counts)
    stat, bins = 0.0, 0
    for count, p in zip(counts, probs, strict=True):
        if p <= 0.0:
            if count > 0:
                return ChiSquare(math.inf, max(bins, 1), 0.0)
            continue
        e = n * p
        stat += (count - e) ** 2 / e
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
    return [count / n if n else 0.0 for count in counts]


def critical_value(dof: int, level: float) -> float:
    """The statistic whose survival probability is `level` at dof degrees of freedom (the
    test rejects above it), by bisection on chi2_sf."""
    lo, hi = 0.0, 1000.0 + 50.0 * dof
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, dof) > level else (lo, mid)
    return hi


def pooled_statistic(
    counts: Mapping[Hashable, int], probs: Mapping[Hashable, float], n: int
) -> tuple[float, int]:
    """Pearson's statistic of n samples' outcome counts against the outcomes' known probabilities,
    and its degrees of freedom: outcomes expected fewer than 5 times are pooled into one
    cell (and that pool into the smallest other cell if it is itself expected below 5)."""
    order = sorted(probs, key=lambda s: -probs[s])
    cells = [[probs[s] * n, counts.get(s, 0)] for s in order]
    big = [cell for cell in cells if cell[0] >= 5]
    pool = [
        sum(cell[0] for cell in cells if cell[0] < 5),
        sum(cell[1] for cell in cells if cell[0] < 5),
    ]
    if pool[0] >= 5:
        big.append(pool)
    elif pool[0] > 0:
        big[-1] = [big[-1][0] + pool[0], big[-1][1] + pool[1]]
    return sum((o - e) ** 2 / e for e, o in big), len(big) - 1


def pooled_chi_square(
    counts: Mapping[Hashable, int], probs: Mapping[Hashable, float], n: int
) -> tuple[float, float]:
    """(statistic, p-value) of pooled_statistic; an outcome of probability 0 that
    was sampled makes the statistic infinite and the p-value 0."""
    if any(o for s, o in counts.items() if probs.get(s, 0.0) == 0.0):
        return math.inf, 0.0
    stat, dof = pooled_statistic(counts, probs, n)
    return stat, chi2_sf(stat, dof)
