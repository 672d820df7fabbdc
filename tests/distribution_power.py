"""The sample sizes of tests/test_distribution.py, from power: for every case and each wrong
rule (and the broken exact match of the model-drafter exact-match cases), estimate the
noncentrality per sample, (chi-square - df) / n, from NEST wrong-rule samples in each comparison
as the test pools it, then find the smallest N at which that wrong rule fails the exact
test (p <= EXACT_P in some view) and the wrong-rule test (p < WRONG_P) with probability
POWER. Run from the repository root: `python -m tests.distribution_power`.

It lives beside the tests because it reads their cases, tiny models and broken exact match;
the pooled chi-square it shares with them is specviz.analysis.chisquare's.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from specviz.analysis.chisquare import critical_value, pooled_statistic
from tests import test_distribution as T
from tests.broken import break_exact_match

NEST = 2000
POWER = 0.99
DRAWS = 200_000
gen = torch.Generator().manual_seed(0)


def power(df: int, lam: float, c: float) -> float:
    """P(noncentral chi-square(df, lam) > c), by simulation."""
    z = torch.randn(DRAWS, generator=gen, dtype=torch.float64) + math.sqrt(lam)
    rest = torch.zeros(DRAWS, dtype=torch.float64)
    if df > 1:
        rest = torch.distributions.Chi2(torch.tensor(float(df - 1))).sample((DRAWS,)).double()
    return float(((z**2 + rest) > c).double().mean())


def needed(per_sample: float, df: int, alpha: float) -> float:
    if per_sample <= 0:
        return math.inf
    c, hi = critical_value(df, alpha), 1
    while power(df, hi * per_sample, c) < POWER:
        hi *= 2
    lo = hi // 2
    while hi - lo > max(1, hi // 50):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(df, mid * per_sample, c) < POWER else (lo, mid)
    return hi


def main() -> None:
    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    worst = {"right": 0.0, "wrong": 0.0}
    for name, verification in T.SPEC_CASES:
        if verification == "rejection":
            wrongs = list(T.WRONG_RULES)
        else:
            wrongs = ["broken"] if T.CASES[name].settings.drafter == "model" else []
        for rule in wrongs:
            if rule == "broken":
                break_exact_match(mp)
                exact, counts, _ = T.run_case(name, "rejection", NEST, "exact-match")
                mp.undo()
            else:
                exact, counts, _ = T.run_case(name, rule, NEST)
            short: Counter = Counter()
            for s, c in counts.items():
                short[s[: T.PREFIX]] += c
            views = {"continuation": (counts, exact), "first": (short, T.marginal(exact, T.PREFIX))}
            best = {"right": math.inf, "wrong": math.inf}
            for cnt, ex in views.values():
                stat, df = pooled_statistic(cnt, ex, NEST)
                for test, alpha in (("right", T.EXACT_P), ("wrong", T.WRONG_P)):
                    best[test] = min(best[test], needed(max(0.0, (stat - df) / NEST), df, alpha))
            row = {"case": name, "verification": verification, "wrong": rule, **best}
            print(json.dumps(row), flush=True)
            for test in worst:
                worst[test] = max(worst[test], best[test])
    print(f"needed: exact-rule tests N >= {worst['right']}, wrong-rule tests N >= {worst['wrong']}")


if __name__ == "__main__":
    main()
