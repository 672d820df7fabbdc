"""Top-k match: keep x iff p(x) > 0 and x is among the target's k most likely tokens (a
token tied with the k-th is among them, as in top-k warping). At the first miss, the
target's own sample from p is emitted. Lossy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from specviz.verify.kept_by_test import KeptByTest
from specviz.verify.registry import BY_KEY, Entry


@dataclass(frozen=True)
class TopKMatch(KeptByTest):
    """Keep x iff p(x) > 0 and x is among p's k most likely tokens."""

    k: int
    entry: ClassVar[Entry] = BY_KEY[("top-k-match", "rejection")]

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        k = min(self.k, p.shape[-1])
        kth = torch.topk(p, k, dim=-1).values[..., -1:]
        return ((p >= kth) & (p > 0)).to(p.dtype)

    @property
    def test_text(self) -> str:
        return f"p(x) > 0 and x among the target's {self.k} most likely tokens"
