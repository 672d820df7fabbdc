"""Verification rules as objects: what each keeps, what it emits instead, whether it is
lossless, and the exact distribution of the token it emits at one verified position.

A rule sees the target's row p and the draft's row q at one position, and the drafted
x ~ q. It keeps x with probability a(x); otherwise it emits a draw from a fallback r_x.
The emitted token is z with probability

    out(z) = q(z) a(z) + sum_x q(x) (1 - a(x)) r_x(z),

and when r_x = r does not depend on x this is q(z) a(z) + (1 - sum_x q(x) a(x)) r(z): O(V).

- The rejection rule (Leviathan et al. 2022; Chen et al. 2023): a = min(1, p/q),
  r = norm(max(0, p - q)); out = p exactly. Its deliberately wrong variants (the settings'
  ``rule``) change a or r, and out with them.
- Exact match: the target's own y ~ p, kept iff y == x, else y is emitted. a(x) = p(x) and
  r_x = p without x, renormalised; out(z) = q(z) p(z) + p(z) (1 - q(z)) = p(z).
- Typical acceptance (Medusa, Cai et al. 2024, section 3.3.1, as vLLM's
  TypicalAcceptanceSampler decides): keep x iff p(x) > min(threshold, alpha exp(-H(p))).
  Lossy.
- Top-k match: keep x iff p(x) > 0 and x is among the target's k most likely tokens. Lossy.

Both lossy rules emit the target's own sample y ~ p at the first position they do not
keep, so r = p. The engine (specviz.engine), the trace's per-decision ``out_tv``
(specviz.record) and the distribution check's prediction (specviz.analysis) all read these
objects. :func:`rule_for` builds the one a run's settings choose.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from specviz.config import Settings

# vLLM adds this to p before the logarithm of the entropy, and so does the typical rule here.
ENTROPY_EPS = 1e-5


class Rule(ABC):
    """One verification rule. Rows are [..., V]; every method is pure."""

    name: ClassVar[str]
    lossless: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """The name as every view prints it: lossy rules say so."""
        return self.name if self.lossless else f"{self.name} (lossy)"

    @abstractmethod
    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """a(x) for every token x of each row [..., V]: the probability that a drafted x is
        kept."""

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """r [..., V], for the rules whose fallback does not depend on the rejected x."""
        raise NotImplementedError(f"{self.name} has no single fallback")

    def out(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The exact distribution [..., V] (float64) of the token emitted at one verified
        position: q(z) a(z) + (1 - sum_x q(x) a(x)) r(z).

        The rows are the distributions as the engine samples them: float32 rows whose sums
        are 1 only up to round-off, which every draw renormalises, so out is built from the
        rows normalised in float64 (a vocabulary-wide row's sum is off by up to about 1e-5,
        more than the float error out should show). a is the decision as the engine takes
        it, on the rows it has."""
        p_hat, q_hat = normalised(p), normalised(q)
        kept = q_hat * self.keep_prob(p, q).double()
        return kept + (1.0 - kept.sum(-1, keepdim=True)) * self.fallback(p_hat, q_hat).double()

    def kept_mass(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """sum_x q(x) a(x) per row: the probability that a draw from q is kept."""
        return (normalised(q) * self.keep_prob(p, q).double()).sum(-1)

    def out_tv(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """TV(out, p) per row: the probability this decision moves away from the target's."""
        return total_variation(self.out(p, q), normalised(p))


def normalised(rows: torch.Tensor) -> torch.Tensor:
    """Rows [..., V] in float64, each divided by its sum."""
    r = rows.double()
    return r / r.sum(-1, keepdim=True)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """0.5 sum_x |a(x) - b(x)| per row, in float64."""
    return 0.5 * (a.double() - b.double()).abs().sum(-1)


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) per row in float64; p itself where that sums to zero."""
    p, q = p.double(), q.double()
    r = (p - q).clamp_min(0.0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp_min(1e-300), p)


@dataclass(frozen=True)
class Rejection(Rule):
    """The papers' rule, or one of the deliberately wrong variants of the settings' rule:
    "resample-from-p" falls back to p, "accept-without-draw" keeps x iff p(x) >= q(x)."""

    rule: str = "exact"
    name: ClassVar[str] = "rejection"

    @property
    def lossless(self) -> bool:  # type: ignore[override]
        return self.rule == "exact"

    @property
    def label(self) -> str:
        return self.name if self.rule == "exact" else f"{self.name} with the wrong rule {self.rule}"

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p, q = p.double(), q.double()
        if self.rule == "accept-without-draw":
            return (p >= q).double()
        ratio = torch.where(q > 0, p / q.clamp_min(1e-300), torch.ones_like(p))
        return ratio.clamp(max=1.0)

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.double() if self.rule == "resample-from-p" else _residual(p, q)

    def out(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        # min(1, p/q) of the normalised rows: min(p, q) then cancels against the residual's
        # mass exactly, where the raw rows' ratio would leave their sums' round-off in out
        p_hat, q_hat = normalised(p), normalised(q)
        kept = q_hat * self.keep_prob(p_hat, q_hat)
        return kept + (1.0 - kept.sum(-1, keepdim=True)) * self.fallback(p_hat, q_hat)


@dataclass(frozen=True)
class ExactMatch(Rule):
    """Keep x iff the target's own sample y ~ p equals it; else emit y."""

    name: ClassVar[str] = "exact-match"

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.double()

    def out(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        # r_x(z) = p(z) / (1 - p(x)) for z != x, so sum_x q(x) (1 - p(x)) r_x(z) sums q over
        # x != z: out(z) = q(z) p(z) + p(z) (1 - q(z)).
        p, q = normalised(p), normalised(q)
        return q * p + p * (1.0 - q)


@dataclass(frozen=True)
class Typical(Rule):
    """Medusa's typical acceptance as vLLM decides it: keep x iff
    p(x) > min(threshold, alpha exp(-H(p))), H(p) = -sum_x p(x) log(p(x) + 1e-5). q is not
    used. At the first position not kept, the target's own sample from p is emitted."""

    threshold: float = 0.09
    alpha: float = 0.3
    name: ClassVar[str] = "typical"
    lossless: ClassVar[bool] = False

    def bar(self, p: torch.Tensor) -> torch.Tensor:
        """The bar each row's p(x) must pass [...], in p's dtype as the decision uses it."""
        entropy = -(p * torch.log(p + ENTROPY_EPS)).sum(-1)
        return torch.minimum(
            torch.full_like(entropy, self.threshold), self.alpha * (-entropy).exp()
        )

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (p > self.bar(p)[..., None]).to(p.dtype)

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.double()


@dataclass(frozen=True)
class TopKMatch(Rule):
    """Keep x iff p(x) > 0 and x is among the target's k most likely tokens (a token tied
    with the k-th is among them, as in top-k warping). At the first miss, the target's own
    sample from p is emitted."""

    k: int = 10
    name: ClassVar[str] = "top-k-match"
    lossless: ClassVar[bool] = False

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        k = min(self.k, p.shape[-1])
        kth = torch.topk(p, k, dim=-1).values[..., -1:]
        return ((p >= kth) & (p > 0)).to(p.dtype)

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.double()


def rule_for(settings: Settings) -> Rule:
    """The rule a run's settings choose."""
    v = settings.verification
    if v == "exact-match":
        return ExactMatch()
    if v == "typical":
        return Typical(settings.typical_threshold, settings.typical_alpha)
    if v == "top-k-match":
        return TopKMatch(settings.match_top_k)
    return Rejection(settings.rule)
