"""One comparison in the distribution check: outcomes binned by how often p makes them, the
speculative and autoregressive counts per bin, and the tests on them (specviz.analysis.chisquare).

Outcomes whose expected count is at least ``MIN_EXPECTED`` get a bin each, the rest share
an "other" bin (folded into the smallest bin when its own expected count is too small for
Pearson's approximation). specviz.analysis.distribution_check draws the samples and builds
the comparisons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specviz.analysis.chisquare import (
    ChiSquare,
    frequencies,
    goodness_of_fit,
    total_variation,
    two_sample,
)

MIN_EXPECTED = 5.0  # smallest expected count that gets a bin of its own
OTHER = "other"

Outcome = tuple[int, ...]


def choose_bins(target: dict[Outcome, float], n: int, min_expected: float = MIN_EXPECTED) -> list:
    """Outcomes expected at least min_expected times in n draws, most likely first."""
    keep = [o for o, p in target.items() if n * p >= min_expected]
    return sorted(keep, key=lambda o: (-target[o], o))


def bin_counts(samples: Sequence[Outcome], bins: Sequence[Outcome]) -> list[int]:
    """Counts per bin, with one final "other" count for everything else."""
    counts = Counter(samples)
    listed = [counts.get(b, 0) for b in bins]
    return [*listed, len(samples) - sum(listed)]


@dataclass
class Comparison:
    """One comparison: bins of outcomes, their target probability p, the two samples'
    counts and the tests."""

    name: str
    labels: list[str]  # one per bin, the last is "other"
    outcomes: list[list[int] | None]  # token ids per bin; None for "other"
    p: list[float]  # the target probability of each bin
    spec: list[int]  # speculative counts per bin
    ar: list[int]  # autoregressive counts per bin
    tv_spec: float  # TV(speculative frequencies, p) over the bins
    tv_ar: float  # TV(autoregressive frequencies, p): the sampling noise at this N
    tv_spec_ar: float
    spec_test: ChiSquare  # speculative against p
    ar_test: ChiSquare  # autoregressive against p (the control)
    two_sample: ChiSquare  # speculative against autoregressive


def compare_outcomes(
    name: str,
    target: dict[Outcome, float],
    spec: Sequence[Outcome],
    ar: Sequence[Outcome],
    label: Callable[[Outcome], str],
    rest: float = 0.0,
    min_expected: float = MIN_EXPECTED,
) -> Comparison:
    """Bin both samples by the outcomes that p makes frequent and run the tests.

    target maps outcomes to p; rest is the total p of the outcomes it does not list
    (0 for the first token, where every outcome with p > 0 is listed). "other" gets rest
    plus the listed outcomes too rare for a bin of their own.
    """
    n = max(len(spec), len(ar))
    bins = choose_bins(target, n, min_expected)
    listed = [target[b] for b in bins]
    binned = set(bins)
    other = rest + sum(p for o, p in target.items() if o not in binned)
    probs = [*listed, other]
    cs, ca = bin_counts(spec, bins), bin_counts(ar, bins)
    fs, fa = frequencies(cs), frequencies(ca)
    return Comparison(
        name=name,
        labels=[label(b) for b in bins] + [OTHER],
        outcomes=[list(b) for b in bins] + [None],
        p=probs,
        spec=cs,
        ar=ca,
        tv_spec=total_variation(fs, probs),
        tv_ar=total_variation(fa, probs),
        tv_spec_ar=total_variation(fs, fa),
        spec_test=goodness_of_fit(*merge_small_other(cs, probs, n, min_expected)),
        ar_test=goodness_of_fit(*merge_small_other(ca, probs, n, min_expected)),
        two_sample=two_sample(
            merge_small_other(cs, probs, n, min_expected)[0],
            merge_small_other(ca, probs, n, min_expected)[0],
        ),
    )


def merge_small_other(
    counts: list[int], probs: list[float], n: int, min_expected: float = MIN_EXPECTED
) -> tuple[list[int], list[float]]:
    """Fold the final "other" bin into the smallest listed bin when its expected count is
    positive but below min_expected (Pearson's approximation needs it). An "other" bin of
    probability exactly 0 stays: any count there is an impossible outcome."""
    other_p = probs[-1]
    if len(probs) < 2 or other_p <= 0.0 or n * other_p >= min_expected:
        return counts, probs
    merged_c = [*counts[:-2], counts[-2] + counts[-1]]
    merged_p = [*probs[:-2], probs[-2] + other_p]
    return merged_c, merged_p
