"""Typical acceptance (Medusa, Cai et al. 2024, section 3.3.1, as vLLM's
TypicalAcceptanceSampler decides): keep x iff p(x) > min(threshold, alpha exp(-H(p))),
H(p) = -sum_x p(x) log(p(x) + 1e-5). q is not consulted. At the first position not kept,
the target's own sample from p is emitted. Lossy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from specviz.verify.kept_by_test import KeptByTest
from specviz.verify.registry import BY_KEY, Entry

# vLLM adds this to p before the logarithm of the entropy, and so does typical verification here.
ENTROPY_EPS = 1e-5


@dataclass(frozen=True)
class Typical(KeptByTest):
    """Keep x iff p(x) > min(threshold, alpha exp(-H(p)))."""

    threshold: float
    alpha: float
    entry: ClassVar[Entry] = BY_KEY[("typical", "rejection")]

    def bar(self, p: torch.Tensor) -> torch.Tensor:
        """The bar each row's p(x) must pass [...], in p's dtype as the decision uses it."""
        entropy = -(p * torch.log(p + ENTROPY_EPS)).sum(-1)
        return torch.minimum(
            torch.full_like(entropy, self.threshold), self.alpha * (-entropy).exp()
        )

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (p > self.bar(p)[..., None]).to(p.dtype)

    @property
    def test_text(self) -> str:
        return f"p(x) > min(threshold {self.threshold:g}, alpha {self.alpha:g} · exp(−H(p)))"
