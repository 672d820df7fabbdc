"""Exact match: the target's own y ~ p is drawn first; the draft x is kept iff x == y, and
at the first mismatch y is emitted. a(x) = p(x) and r_x = p without x, renormalised, so
out(z) = q(z) p(z) + p(z) (1 - q(z)) = p(z): lossless. On a tree, the first child equal to
the node's y is kept; a later child is kept with probability p'(x), p' being p without the
children tried before it, renormalised; where none is equal, y (drawn from p) is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from specviz.sampling import draw
from specviz.trace import Added, Drafted
from specviz.verify.base import Verification, normalised
from specviz.verify.registry import BY_KEY, Entry
from specviz.verify.verdict import Verdict, leading
from specviz.verify.words import num


@dataclass(frozen=True)
class ExactMatch(Verification):
    """Keep x iff the target's own sample y ~ p equals it; else emit y."""

    entry: ClassVar[Entry] = BY_KEY[("exact-match", "rejection")]
    draws: ClassVar[str | None] = "sample"
    called_as: ClassVar[str] = "exact match"
    fallback_source: ClassVar[str] = "sample"
    measure: ClassVar[tuple[str, str]] = ("sum_x p(x) q(x)", "match_alpha")
    sibling_step: ClassVar[str] = "p′ drops it (the target's sample is not that token)"

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.double()

    def out(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        # r_x(z) = p(z) / (1 - p(x)) for z != x, so sum_x q(x) (1 - p(x)) r_x(z) sums q over
        # x != z: out(z) = q(z) p(z) + p(z) (1 - q(z)).
        p, q = normalised(p), normalised(q)
        return q * p + p * (1.0 - q)

    def out_siblings(self, p: torch.Tensor, q: torch.Tensor, b: int) -> torch.Tensor:
        # y ~ p is drawn once at the node and emitted whether or not a child equals it
        return normalised(p)

    def reject_prob_siblings(self, p: torch.Tensor, q: torch.Tensor, b: int) -> torch.Tensor:
        # the node's y ~ p is drawn once; every child is rejected iff none of the b i.i.d.
        # draws from q equals it: sum_y p(y) (1 - q(y))^b (p' depends on which were tried)
        p, q = normalised(p), normalised(q)
        return (p * (1.0 - q) ** b).sum(-1)

    def tree_draws(self, p, n, gen, greedy):
        # [n + 1]: y at every row of p (a chain's k + 1 rows; a tree's root and every node);
        # greedy: each row's argmax, no RNG
        return draw(p, gen, greedy)

    def decide(self, p, q, drafts, drawn):
        """drawn: [k+1] the target's own y_i ~ p_i. Keep x_i while y_i == x_i; at the first
        mismatch n the round adds y_n (dist p[n]), after a full accept y_k, the bonus. Every
        emitted token is a draw from p; a draft x_i passes with probability p(x_i)."""
        k = drafts.shape[0]
        idx = torch.arange(k, device=drafts.device)
        p_x, q_x = p[idx, drafts], q[idx, drafts]  # [k], [k]
        n = leading(drawn[:k] == drafts)
        return Verdict(n, p_x, q_x, p_x, p[n], samples=drawn)

    def sibling_next(self, p, p_prime, q, x=None):
        """p' without the rejected child x, renormalised (y is not x)."""
        if x is None:
            raise ValueError("exact match updates p' by the rejected token")
        rest = p_prime.clone()
        rest[..., x] = 0.0
        total = rest.sum(-1, keepdim=True)
        return torch.where(total > 0, rest / total.clamp_min(1e-300), p_prime)

    def sibling_final(self, p, p_prime, q):
        return p  # y was drawn from the node's own p before any child was tried

    def sibling_source(self, tried: int) -> str:
        return "sample"

    def try_child(self, p_prime, q, x, draw):
        # draw is the node's y: the child is kept iff it is y
        return float(p_prime[x]), x == draw

    def shown_keep(self, d: Drafted) -> float:
        return d.p_prime if d.p_prime is not None else d.p

    def draw_text(self, d: Drafted, a: float) -> str:
        if d.target_text is None and d.p_prime is not None:  # greedy, a later sibling
            return f"No draw in greedy mode: a(x) = p′(x) = {num(a)}."
        if d.target_text is None:  # greedy: the target's argmax is its sample
            return f"No draw in greedy mode: p and q are one-hot, so a(x) = {num(a)}."
        pname = "p′" if d.p_prime is not None else "p"
        return f"The target sampled {d.target_text!r} from {pname}; a(x) = {pname}(x) = {num(a)}."

    def keep_title(self, d: Drafted) -> str:
        return f"exact match: the chance {self.keep_label(d)} that the target samples the draft"

    def keep_label(self, d: Drafted) -> str:
        return "p′(x)" if d.p_prime is not None else "p(x)"

    def keep_text(self, d: Drafted) -> str:
        p, pname = (d.p_prime, "p′") if d.p_prime is not None else (d.p, "p")
        return (
            f"exact match: the target sampled {d.target_text!r}; the draft proposed "
            f"{d.text!r}: {d.status} (the target samples this draft with probability "
            f"{pname} = {num(p)})"
        )

    def replace_text(self, a: Added, drafts: int | None = None) -> str:
        if a.status == "bonus":
            return super().replace_text(a, drafts)
        return (
            f"resampled: the draft did not match, so the round keeps the target's own sample "
            f"{a.text!r}, drawn from p (p = {num(a.p)})"
        )

    def statement(self) -> str:
        return (
            "draw the target's own y ~ p first; keep the draft x when x == y (probability p(x)), "
            "else emit y"
        )
