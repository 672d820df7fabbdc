"""The sample size of the tree check tests (tests/test_tree.py), from power, as
tests/distribution_power.py computes the chain's: for each tree shape, draw NEST samples
of the distribution check under the wrong sibling rule "same-target-for-siblings" (target
temperature 1.0, draft temperature 0.7), estimate the noncentrality per sample,
(chi-square - df) / n, in each of the check's views as it bins them, and find the smallest N
at which the rule fails the check (some view below significance / views) with probability
POWER. Run from the repository root: `python -m tests.tree_power`.
"""

from __future__ import annotations

import json

import torch

from specviz.analysis import distribution_check as dc
from tests import test_tree as T
from tests.distribution_power import needed

NEST = 1000


def main() -> None:
    torch.set_num_threads(1)
    pair = T.check_pair()
    for shape in T.CHECK_SHAPES:
        s = T.check_settings(shape)
        r = dc.run_check(pair, T.CHECK_PROMPT, s, n=NEST, length=3, rule=T.WRONG_RULE)
        alpha = r.threshold
        best = min(
            needed(
                max(0.0, (v.spec_test.statistic - v.spec_test.dof) / NEST), v.spec_test.dof, alpha
            )
            for v in r.comparisons
        )
        row = {
            "tree": shape,
            "rule": T.WRONG_RULE,
            "predicted_tv": r.predicted_tv,
            "needed_n": best,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
