"""What a verification decides for one round of k drafts (:class:`Verdict`), and the one
residual norm(max(0, p - q)) every decision and every computed distribution draws on.

Glossary (as vLLM's rejection sampler opens with one): a draft is *accepted* while the
verification keeps it; the first one not kept is *rejected* and the later ones are
*discarded*; the round then adds one token, *resampled* (vLLM: "recovered") from the
verification's fallback where a draft was rejected, or the *bonus* from p after a full
accept.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.sampling import draw


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) per row [..., V], in p's dtype; p itself where that sums to zero
    (p == q: no NaN)."""
    r = (p - q).clamp_min(0.0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp_min(1e-300), p)


def leading(kept: torch.Tensor) -> int:
    """The length of the leading run of True in kept [k]: the accepted prefix."""
    flags = kept.tolist()  # k flags, read in one transfer
    return flags.index(False) if False in flags else len(flags)


@dataclass(frozen=True)
class Verdict:
    """What the verification decided for one round of k drafted tokens."""

    n_accepted: int  # length of the accepted prefix, 0..k
    p_x: torch.Tensor  # [k] p(x_i)
    q_x: torch.Tensor  # [k] q(x_i)
    accept_prob: torch.Tensor  # [k] a(x_i), the probability each draft is kept once drafted
    dist: torch.Tensor  # [V] the distribution the added token is drawn from
    # Exact match only: [k+1] the target's own samples y_i ~ p_i, drawn before the decision
    # (y_n is the added token). None otherwise.
    samples: torch.Tensor | None = None
    # [k] the uniforms the decision drew (None when it drew none, or in greedy mode)
    u: torch.Tensor | None = None
    # where the added token comes from (a key of specviz.verify.words.SOURCES); None: the
    # verification's chain fallback after a rejection, "bonus" after a full accept
    source: str | None = None

    @property
    def resampled(self) -> bool:
        """True: the added token replaces a rejected draft; False: a bonus after a full
        accept (or no added token, after an accepted EOS)."""
        return self.n_accepted < self.p_x.shape[0]

    def added_token(self, generator: torch.Generator, greedy: bool) -> int:
        """The token the round adds: under exact match the target's sample y_n, already
        drawn; otherwise a draw from dist (no RNG in greedy mode)."""
        if self.samples is not None:
            return int(self.samples[self.n_accepted])
        return int(draw(self.dist, generator, greedy))
