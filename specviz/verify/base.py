"""What every verification is: a class that decides, computes its computed output
distribution and says in words what it did.

A verification sees the target's row p and the draft's row q at one position, and the
drafted x ~ q. It keeps x with probability a(x); otherwise it emits a draw from a fallback
r_x. The emitted token is z with probability

    out(z) = q(z) a(z) + sum_x q(x) (1 - a(x)) r_x(z),

and when r_x = r does not depend on x this is q(z) a(z) + (1 - sum_x q(x) a(x)) r(z): O(V).

On a tree a node's b children are drawn i.i.d. from q and tried one after another against
an updated target p' (p' = p at the first; after a rejection ``sibling_next``); after every
child is rejected the token comes from ``sibling_final``. ``out_siblings`` is that
procedure's computed output distribution, built by the same recursion; with b = 1 it is the
chain's ``out``.

The engine (specviz.engine), the tree walk (specviz.verify.tree_walk, through
``decide_tree``), the trace's per-decision records (specviz.record), the views and the
distribution check all ask these objects; none of them asks a verification's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from specviz.trace import Added, Drafted
from specviz.verify.registry import Entry, label
from specviz.verify.tree_walk import Tree, TreeVerdict, walk
from specviz.verify.verdict import Verdict, leading, residual
from specviz.verify.words import num, pair_fmt, pq, source_text


def normalised(rows: torch.Tensor) -> torch.Tensor:
    """Rows [..., V] in float64, each divided by its sum."""
    r = rows.double()
    return r / r.sum(-1, keepdim=True)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """0.5 sum_x |a(x) - b(x)| per row, in float64."""
    return 0.5 * (a.double() - b.double()).abs().sum(-1)


class Verification(ABC):
    """One verification. Rows are [..., V]; every tensor method is pure."""

    entry: ClassVar[Entry]
    # what the decision draws from the run's generator: "u" (one uniform per tried draft),
    # "sample" (the target's own y ~ p at every row) or None (nothing)
    draws: ClassVar[str | None] = "u"
    # where a chain's replacement comes from after a rejection (a key of words.SOURCES)
    fallback_source: ClassVar[str] = "residual"
    # the name of its acceptance measure, and the trace.Stats field that holds it
    measure: ClassVar[tuple[str, str]] = ("alpha = sum_x min(p, q)", "alpha")
    # what a rejected sibling does to the target the next one is tried against
    sibling_step: ClassVar[str] = "p′ becomes norm(max(0, p′ − q))"
    # how a sentence names a lossless verification ("the rejection rule", "exact match")
    called_as: ClassVar[str] = ""
    # whether keep_prob is elementwise: a(x) reads p(x) and q(x) alone, so a chain's
    # decision computes it at the drafts only (a test on the whole row of p is not)
    pointwise: ClassVar[bool] = False

    # --- what it is ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.entry.verification

    @property
    def rule(self) -> str:
        return self.entry.rule

    @property
    def lossless(self) -> bool:
        return self.entry.lossless

    @property
    def called(self) -> str:
        """How a sentence names it: "the rejection rule", "exact match", "the wrong rule
        resample-from-p", "typical (lossy)"."""
        if self.entry.wrong:
            return f"the wrong rule {self.rule}"
        return self.called_as or self.label

    @property
    def called_run(self) -> str:
        """What decided a run, as a sentence's subject: "typical (lossy) verification", or
        "rejection with the deliberately wrong rule resample-from-p" (a rule, not a
        verification of its own)."""
        return self.label if self.entry.wrong else f"{self.label} verification"

    def keep_title(self, d: Drafted) -> str:
        """The inspector's title over the bar of a(x) against the draw."""
        if self.draws == "u":
            return f"acceptance probability {self.keep_label(d)} against the draw u"
        return f"{self.label}: keep probability a(x), decided without a draw"

    @property
    def label(self) -> str:
        """The name as every view prints it: lossy and deliberately wrong rules say so."""
        return label(self.entry.verification, self.entry.rule)

    # --- the decision on a chain ---------------------------------------------------------

    @abstractmethod
    def keep_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """a(x) for every token x of each row [..., V]: the probability that a drafted x is
        kept."""

    def fallback(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """r [..., V] in the rows' dtype, for the verifications whose fallback does not
        depend on x: what a chain's added token is drawn from after a rejection."""
        raise NotImplementedError(f"{self.label} has no single fallback")

    def chain_draws(
        self, p: torch.Tensor, k: int, gen: torch.Generator, greedy: bool
    ) -> torch.Tensor | None:
        """What a chain's decision draws from the run's generator before it decides: one
        uniform per draft ([k]; None when greedy or the verification draws none)."""
        return self.tree_draws(p, k, gen, greedy)

    def kept(
        self,
        p_x: torch.Tensor,
        q_x: torch.Tensor,
        a: torch.Tensor,
        drawn: torch.Tensor | None,
    ) -> torch.Tensor:
        """Whether each draft passes [k] (bool), given p(x_i), q(x_i), a(x_i) and what
        chain_draws drew."""
        raise NotImplementedError(f"{self.label} decides by its own decide")

    def decide(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        drawn: torch.Tensor | None,
    ) -> Verdict:
        """Decide k drafts, given what chain_draws drew: p [k+1, V] (row k gives the bonus),
        q [k, V] the rows the drafts were drawn from, drafts [k]. The accepted prefix ends
        at the first draft not kept; the added token comes from the fallback there, or from
        p[k] (the bonus) after a full accept. Pure: draws nothing."""
        k = drafts.shape[0]
        idx = torch.arange(k, device=drafts.device)
        p_x, q_x = p[idx, drafts], q[idx, drafts]  # [k], [k]
        a = self.keep_prob(p_x, q_x) if self.pointwise else self.keep_prob(p[:k], q)[idx, drafts]
        a = a.to(p.dtype)  # [k] a(x_i)
        n = leading(self.kept(p_x, q_x, a, drawn))
        dist = p[k] if n == k else self.fallback(p[n], q[n])  # [V]
        return Verdict(n, p_x, q_x, a, dist, u=drawn)

    def decide_chain(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        gen: torch.Generator,
        greedy: bool,
    ) -> Verdict:
        """Draw what the decision needs from gen (nothing in greedy mode), then decide k
        drafts: p [k+1, V], q [k, V], drafts [k]."""
        return self.decide(p, q, drafts, self.chain_draws(p, drafts.shape[0], gen, greedy))

    # --- the decision on a tree ----------------------------------------------------------

    def decide_tree(
        self,
        p: torch.Tensor,
        tree: Tree,
        draws: torch.Tensor | None,
        eos_ids: frozenset[int],
    ) -> TreeVerdict:
        """Decide a tree of drafts, given what tree_draws drew: p [n + 1, V] the warped
        target rows (row 1 + j after node j). The walk (specviz.verify.tree_walk) tries each
        node's children in draw order with the sibling rule below. Pure: draws nothing."""
        return walk(self, p, tree, draws, eos_ids)

    # --- the decision on a node's siblings (trees) ---------------------------------------

    def tree_draws(
        self, p: torch.Tensor, n: int, gen: torch.Generator, greedy: bool
    ) -> torch.Tensor | None:
        """What a tree round draws before its walk: one uniform per node ([n]; None when
        greedy or the verification draws none)."""
        if self.draws != "u" or greedy or not n:
            return None
        return torch.rand(n, generator=gen, device=p.device)

    def sibling_keep(self, p_prime: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """a(x) [..., V] of a child tried against the updated target p'."""
        return self.keep_prob(p_prime, q)

    def sibling_next(
        self, p: torch.Tensor, p_prime: torch.Tensor, q: torch.Tensor, x: int | None = None
    ) -> torch.Tensor:
        """The updated target after the child x (drawn from q) was rejected against p'."""
        return residual(p_prime, q)

    def sibling_final(
        self, p: torch.Tensor, p_prime: torch.Tensor, q: torch.Tensor
    ) -> torch.Tensor:
        """What the added token is drawn from once every child was rejected: p is the node's
        own row, p' the updated target after the last rejection, q the row the children
        were drawn from."""
        return p_prime

    def sibling_source(self, tried: int) -> str:
        """Where the added token came from after `tried` children were all rejected."""
        return "siblings" if tried > 1 else self.fallback_source

    def try_child(
        self, p_prime: torch.Tensor, q: torch.Tensor, x: int, draw: float | None
    ) -> tuple[float, bool]:
        """One child x tried against p' [V]: (a(x), whether it is kept), given its uniform
        (None when greedy: keep x iff a(x) = 1)."""
        a = float(self.sibling_keep(p_prime[None].double(), q[None].double())[0, x])
        return a, (a >= 1.0 if draw is None else draw < a)

    # --- the computed output distribution ---------------------------------------------------

    def out(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The computed distribution [..., V] (float64) of the token emitted at one verified
        position of a chain: q(z) a(z) + (1 - sum_x q(x) a(x)) r(z).

        Built from the rows normalised in float64: a vocabulary-wide float32 row's sum is
        off by up to about 1e-5, more than the float error out should show."""
        p_hat, q_hat = normalised(p), normalised(q)
        kept = q_hat * self.keep_prob(p_hat, q_hat)
        return kept + (1.0 - kept.sum(-1, keepdim=True)) * self.fallback(p_hat, q_hat)

    def out_siblings(self, p: torch.Tensor, q: torch.Tensor, b: int) -> torch.Tensor:
        """The computed distribution [..., V] (float64) of the token emitted at a node whose b
        children are drawn i.i.d. from q and tried in draw order against p'."""
        p_hat, q_hat = normalised(p), normalised(q)
        p_prime, out = p_hat, torch.zeros_like(p_hat)
        reach = torch.ones(p_hat.shape[:-1] + (1,), dtype=p_hat.dtype)  # P(all earlier rejected)
        for _ in range(b):
            kept = q_hat * self.sibling_keep(p_prime, q_hat)
            out = out + reach * kept
            reach = reach * (1.0 - kept.sum(-1, keepdim=True))
            p_prime = self.sibling_next(p_hat, p_prime, q_hat)
        return out + reach * self.sibling_final(p_hat, p_prime, q_hat)

    def kept_mass(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """sum_x q(x) a(x) per row: the probability that a draw from q is kept."""
        return (normalised(q) * self.keep_prob(normalised(p), normalised(q))).sum(-1)

    def reject_prob(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The probability per row that this decision rejects a draft drawn from q at a
        chain's position: 1 - sum_x q(x) a(x). It is 1 - sum_x min(p, q) (1 - the overlap)
        for the rejection rule only; exact match's is 1 - sum_x p q, a lossy rule's 1 - its
        kept mass."""
        return 1.0 - self.kept_mass(p, q)

    def reject_prob_siblings(self, p: torch.Tensor, q: torch.Tensor, b: int) -> torch.Tensor:
        """The probability per row that every one of a node's b children (drawn i.i.d. from
        q, tried in draw order) is rejected, so that the node's token comes from the
        fallback: the product over the trials of 1 - sum_x q(x) a'(x), a' the keep against
        the updated target p' (sibling_next after each rejection), by the same recursion as
        out_siblings; with b = 1 it is reject_prob. Exact for a verification whose update
        does not depend on the rejected token."""
        p_hat, q_hat = normalised(p), normalised(q)
        p_prime = p_hat
        reach = torch.ones(p_hat.shape[:-1], dtype=p_hat.dtype)
        for _ in range(b):
            reach = reach * (1.0 - (q_hat * self.sibling_keep(p_prime, q_hat)).sum(-1))
            p_prime = self.sibling_next(p_hat, p_prime, q_hat)
        return reach

    def out_tv(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """TV(out, p) per row: the probability this decision moves away from the target's."""
        return total_variation(self.out(p, q), normalised(p))

    # --- words (plain text; views escape it) ---------------------------------------------

    @abstractmethod
    def statement(self) -> str:
        """How it decides, in one sentence with its parameters."""

    def promise_text(self) -> str:
        """What its output is distributed as: a clause that follows its label ("typical
        (lossy) verification, which keeps ...")."""
        if self.lossless:
            return (
                "which is lossless: whatever q is, every emitted token is distributed as the "
                "target's own sampling would give it"
            )
        if self.entry.wrong:
            return (
                "whose output is not distributed as the target's p (the distribution check "
                "exists to catch it)"
            )
        return "which keeps drafts the target would not emit as often, so out differs from p"

    def shown_keep(self, d: Drafted) -> float:
        """a(x) for a reveal, from the record's numbers: min(1, p/q), or min(1, p'/q) where
        siblings were tried first (the value the engine decided with)."""
        p = d.p_prime if d.p_prime is not None else d.p
        return min(1.0, p / d.q) if d.q > 0 else 0.0

    def draw_text(self, d: Drafted, a: float) -> str:
        """What the decision on d drew, and its true a(x) (a reveal, before the verdict)."""
        if self.draws == "u" and d.u is not None:
            p, pname = (d.p_prime, "p′") if d.p_prime is not None else (d.p, "p")
            ratio = p / d.q if d.q > 0 else float("inf")
            return f"u = {d.u:.3f}; a(x) = min(1, {pname}/q) = min(1, {num(ratio)}) = {num(a)}."
        if self.draws == "u" and d.p_prime is not None:
            return (
                f"No draw in greedy mode: a(x) = 1 when p′(x) = {pq(d.p_prime)} ≥ q(x) = "
                f"{pq(d.q)}, so a(x) = {num(a)}."
            )
        if self.draws == "u":
            return f"No draw in greedy mode: p and q are one-hot, so a(x) = {num(a)}."
        label = self.keep_label(d)
        return f"No draw: {label if label.startswith('a(x)') else 'a(x) = ' + label} = {num(a)}."

    def keep_label(self, d: Drafted) -> str:
        """The name of a(x) as the inspector's bars label it."""
        return "min(1, p′/q)" if d.p_prime is not None else "min(1, p/q)"

    def keep_text(self, d: Drafted) -> str:
        """Why draft d was kept or not, with its numbers (d has been tried)."""
        p, pname = (d.p_prime, "p′") if d.p_prime is not None else (d.p, "p")
        ratio = p / d.q if d.q > 0 else float("inf")
        if d.u is None:
            if d.p_prime is None:
                same = "equals" if d.status == "accepted" else "differs from"
                return f"{d.status} (greedy): the draft's argmax {same} the target's argmax"
            return (
                f"{d.status} (greedy): {pname}(x) = {pq(p)} "
                f"{'≥' if d.status == 'accepted' else '<'} q(x) = {pq(d.q)}"
            )
        a = d.accept_prob
        if d.status == "accepted" and ratio >= 1:
            return (
                f"accepted: {pname}/q = {pq(p)}/{pq(d.q)} ≥ 1, so min(1, {pname}/q) = 1 "
                f"and any u = {d.u:.2f} passes"
            )
        su, sa = pair_fmt(d.u, a)
        numbers = f"({pname} = {pq(p)}, q = {pq(d.q)})"  # enough digits to check the ratio
        if d.status == "accepted":
            return f"accepted: u = {su} < {pname}/q = {sa} {numbers}"
        return f"rejected: u = {su} ≥ {pname}/q = {sa} {numbers}"

    def replace_text(self, a: Added, drafts: int | None = None) -> str:
        """Where the added token came from, with its numbers; drafts: how many drafts its
        round had (0: a round that drafted nothing, whose one call drew it; None: not
        known)."""
        src = a.source or ("bonus" if a.status == "bonus" else self.fallback_source)
        if a.status == "bonus" and drafts == 0:
            return (
                f"bonus: this round drafted nothing, so its one target call drew {a.text!r} "
                f"from p (p = {num(a.p)})"
            )
        if a.status == "bonus":
            return (
                f"bonus: every draft was accepted, so the same target call drew {a.text!r} "
                f"from p (p = {num(a.p)}) at no extra cost"
            )
        return (
            f"resampled: after the rejection the target drew {a.text!r} from "
            f"{source_text(src)}, where it had probability {num(a.prob)} (p = {num(a.p)})"
        )

    def describe(self) -> dict[str, Any]:
        """The plain facts views print beside a run."""
        return {"label": self.label, "lossless": self.lossless, "test": self.statement()}
