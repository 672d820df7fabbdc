"""The papers' rejection rule (Leviathan et al. 2022; Chen et al. 2023) and its
deliberately wrong variants, kept so that the distribution check can show that it catches a
broken algorithm.

- rejection: keep x iff u < min(1, p(x)/q(x)); at the first rejection draw from
  norm(max(0, p - q)). On a tree, siblings are tried in draw order against p', updated to
  norm(max(0, p' - q)) after each rejection, and after all are rejected the token comes from
  the final p' (SpecInfer's multi-step speculative sampling; Yang et al. 2024). out = p.
- resample-from-p: the same test, but the replacement comes from p itself.
- accept-without-draw: keep x iff p(x) >= q(x), with no draw.
- same-target-for-siblings: on a tree, every sibling is tried against the original p, and
  after all are rejected the draw comes from norm(max(0, p - q)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from specviz.verify.base import Verification
from specviz.verify.registry import BY_KEY, Entry
from specviz.verify.verdict import residual
from specviz.verify.words import pq


@dataclass(frozen=True)
class Rejection(Verification):
    """Keep x iff u < min(1, p/q); replace from the residual (a tree's final p')."""

    entry: ClassVar[Entry] = BY_KEY[("rejection", "rejection")]
    called_as: ClassVar[str] = "the rejection rule"
    pointwise: ClassVar[bool] = True  # min(1, p/q), and the wrong rules' [p >= q]

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p, q = p.double(), q.double()
        ratio = torch.where(q > 0, p / q.clamp_min(1e-300), torch.ones_like(p))
        return ratio.clamp(max=1.0)

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return residual(p, q)

    def kept(self, p_x, q_x, a, drawn):
        # u < p/q: P(keep) = min(1, p/q) and p(x) = 0 never passes; greedy (no u): p/q >= 1
        ratio = p_x / q_x  # [k]; q(x_i) > 0: each draft was drawn from its row
        return ratio >= 1.0 if drawn is None else drawn < ratio

    def try_child(self, p_prime, q, x, draw):
        # the ratio in the rows' own dtype, as a chain's decision computes it
        ratio = float(p_prime[x] / q[x])
        return min(1.0, ratio), (ratio >= 1.0 if draw is None else draw < ratio)

    def statement(self) -> str:
        return (
            "keep the draft x when u < min(1, p(x)/q(x)), u ~ U[0, 1) (on a tree, a later "
            "sibling is tried against p′ = norm(max(0, p′ − q)) left by the ones before it); "
            "at a rejection draw from the residual norm(max(0, p − q))"
        )


@dataclass(frozen=True)
class ResampleFromP(Rejection):
    """Deliberately wrong: the replacement comes from p instead of the residual."""

    entry: ClassVar[Entry] = BY_KEY[("rejection", "resample-from-p")]
    fallback_source: ClassVar[str] = "p"

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p

    def sibling_final(self, p, p_prime, q):
        return p

    def sibling_source(self, tried: int) -> str:
        return "p"

    def statement(self) -> str:
        return (
            "keep the draft x when u < min(1, p(x)/q(x)), u ~ U[0, 1); at a rejection draw from "
            "p itself (deliberately wrong: the residual norm(max(0, p − q)) is skipped)"
        )


@dataclass(frozen=True)
class AcceptWithoutDraw(Rejection):
    """Deliberately wrong: keep x iff p(x) >= q(x), with no draw."""

    entry: ClassVar[Entry] = BY_KEY[("rejection", "accept-without-draw")]
    draws: ClassVar[str | None] = None
    measure: ClassVar[tuple[str, str]] = ("kept mass = sum_x q(x) a(x)", "kept_mass")

    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (p.double() >= q.double()).double()

    def chain_draws(self, p, k, gen, greedy):
        # the uniforms the rule it imitates would draw are drawn and recorded, unused: the
        # run's random stream stays the rejection rule's, and the calibration view shows
        # how the outcomes depart from min(1, p/q) for the same u
        return torch.rand(k, generator=gen, device=p.device) if not greedy and k else None

    def kept(self, p_x, q_x, a, drawn):
        return p_x / q_x >= 1.0  # [k], whatever u says

    def try_child(self, p_prime, q, x, draw):
        kept = bool(p_prime[x] >= q[x])
        return float(kept), kept

    def shown_keep(self, d) -> float:
        p = d.p_prime if d.p_prime is not None else d.p
        return 1.0 if p >= d.q else 0.0

    def keep_label(self, d) -> str:
        return "a(x) = [p′ ≥ q]" if d.p_prime is not None else "a(x) = [p ≥ q]"

    def keep_text(self, d) -> str:
        p, pname = (d.p_prime, "p′") if d.p_prime is not None else (d.p, "p")
        sign = "≥" if d.status == "accepted" else "<"
        return (
            f"{d.status} without a draw: {pname}(x) = {pq(p)} {sign} q(x) = {pq(d.q)} "
            "(deliberately wrong: a draft with p < q should still pass with probability p/q)"
        )

    def statement(self) -> str:
        return (
            "keep the draft x when p(x) ≥ q(x), with no draw (deliberately wrong: the rule keeps "
            "it with probability min(1, p/q)); at a rejection draw from the residual"
        )


@dataclass(frozen=True)
class SameTargetForSiblings(Rejection):
    """Deliberately wrong on a tree: every sibling is tried against the original p."""

    entry: ClassVar[Entry] = BY_KEY[("rejection", "same-target-for-siblings")]
    sibling_step: ClassVar[str] = "the next sibling is tried against the original p again"

    def sibling_next(self, p, p_prime, q, x=None):
        return p

    def sibling_final(self, p, p_prime, q):
        return residual(p, q)

    def sibling_source(self, tried: int) -> str:
        return "residual"

    def keep_label(self, d) -> str:
        return "min(1, p/q)"

    def statement(self) -> str:
        return (
            "keep the draft x when u < min(1, p(x)/q(x)), every sibling against the original p "
            "(deliberately wrong: a later sibling must be tried against p′ left by the ones "
            "before it); after all are rejected draw from norm(max(0, p − q))"
        )
