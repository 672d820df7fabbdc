"""A deliberately broken exact match, for showing that the distribution tests catch one.

Exact match mixed up with the rejection rule: at a mismatch the round adds a draw from
the residual norm(max(0, p - q)) instead of the target's own sample y. Its first token is
distributed as q p + (1 - sum_x p q) norm(max(0, p - q)), not as p.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.verify.exact_match import ExactMatch
from specviz.verify.verdict import Verdict, residual

_DECIDE = ExactMatch.decide


def match_then_residual(
    self: ExactMatch,
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    samples: torch.Tensor,
) -> Verdict:
    v = _DECIDE(self, p, q, drafts, samples)
    if not v.resampled:
        return v
    n = v.n_accepted  # no samples: the engine draws the added token from dist
    return dataclasses.replace(v, samples=None, dist=residual(p[n], q[n]))


def break_exact_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the engine's exact match add a residual draw at a mismatch (for one test)."""
    monkeypatch.setattr(ExactMatch, "decide", match_then_residual)
