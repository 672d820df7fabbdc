"""The multi-draft walk on a tree of drafts (a tree round's decision, as a chain's is
``Verification.decide``): walk down from the root; at each node try its children in draw
order against the updated target p' with the verification's sibling rule (``try_child``,
``sibling_next``), descend into the first one kept, and where every child is rejected draw
the added token from ``sibling_final``. specviz.tree drafts the tree and feeds it to the
target; this module only decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.sampling import draw

# A tree's nodes are numbered breadth first from 0; the root (the last token of the
# sequence, whose target row is p's row 0) is ROOT. specviz.tree numbers its drafts so.
ROOT = -1


class Tree(Protocol):
    """The drafted tree as the walk reads it (specviz.tree.TreeDraft)."""

    ids: list[int]  # [n] each node's token

    def children(self, node: int) -> list[int]: ...  # in draw order

    def q(self, j: int) -> torch.Tensor: ...  # [V] the row node j was drawn from


class SiblingRule(Protocol):
    """What the walk asks of a verification (specviz.verify.base.Verification has it all)."""

    draws: str | None  # "u": one uniform per node; "sample": the target's own samples

    def try_child(
        self, p_prime: torch.Tensor, q: torch.Tensor, x: int, draw: float | None
    ) -> tuple[float, bool]: ...

    def sibling_next(
        self, p: torch.Tensor, p_prime: torch.Tensor, q: torch.Tensor, x: int | None = None
    ) -> torch.Tensor: ...

    def sibling_final(
        self, p: torch.Tensor, p_prime: torch.Tensor, q: torch.Tensor
    ) -> torch.Tensor: ...

    def sibling_source(self, tried: int) -> str: ...


@dataclass
class Trial:
    """One child tried against the (updated) target at its parent."""

    node: int
    trial: int  # its turn among its siblings, from 0
    p_prime: float  # p'(x) at the trial: p(x) at the first, after siblings the updated target
    accept_prob: float  # a(x) at the trial, as the verification computed it from p'
    accepted: bool
    updated: bool = False  # whether p' differed from the node's own p (a sibling came first)


@dataclass
class TreeVerdict:
    """What verification decided on a tree."""

    path: list[int]  # accepted nodes, root side first
    trials: list[Trial]
    dist: torch.Tensor  # [V] the distribution the added token comes from
    resampled: bool  # True: every child of the last path node was rejected
    stop: int  # the node (or ROOT) the walk stopped at: the added token's parent
    # exact match: [n + 1] the target's own samples (row 0 at the root, 1 + j at node j)
    samples: torch.Tensor | None = None
    # where the added token comes from (a key of specviz.verify.words.SOURCES)
    source: str = "bonus"

    def added_token(self, gen: torch.Generator, greedy: bool) -> int:
        if self.samples is not None:
            return int(self.samples[self.stop + 1])
        return int(draw(self.dist, gen, greedy))


def walk(
    verification: SiblingRule,
    p: torch.Tensor,
    tree: Tree,
    draws: torch.Tensor | None,
    eos_ids: frozenset[int],
) -> TreeVerdict:
    """The multi-draft walk on a tree. p: [n + 1, V] warped target rows (row 1 + j after
    node j); draws: what verification.tree_draws drew (one uniform per node, the target's
    samples per row, or None). At each node the children are tried in draw order, each by
    verification.try_child against p' (the node's row at the first; after a rejection
    verification.sibling_next); after all are rejected the token comes from
    verification.sibling_final."""
    samples = draws if verification.draws == "sample" else None
    y = None if samples is None else samples.tolist()
    path: list[int] = []
    trials: list[Trial] = []
    node = ROOT
    while True:
        kids = tree.children(node)
        row = p[node + 1]
        if not kids:
            return TreeVerdict(path, trials, row, False, node, samples)
        p_prime = row
        for t, j in enumerate(kids):
            x, q = tree.ids[j], tree.q(j)
            if y is not None:
                d: float | None = y[node + 1]
            else:
                d = None if draws is None else float(draws[j])
            a, keep = verification.try_child(p_prime, q, x, d)
            trials.append(Trial(j, t, float(p_prime[x]), a, keep, p_prime is not row))
            if keep:
                break
            p_prime = verification.sibling_next(row, p_prime, q, x)
        else:
            dist = verification.sibling_final(row, p_prime, tree.q(kids[-1]))
            source = verification.sibling_source(len(kids))
            return TreeVerdict(path, trials, dist, True, node, samples, source)
        path.append(j)
        node = j
        if x in eos_ids:
            return TreeVerdict(path, trials, p[node + 1], False, node, samples)
