"""Trees of drafts: the shape, drafting depth by depth, and the target call that scores them.

A tree's shape gives the children per depth: (2, 2, 1) drafts 2 children at the root, 2 under
each of those and 1 under each of the 4, 10 nodes. Nodes are numbered breadth first; a
node's parent is an earlier node, or -1 for the root (the last token of the sequence).

Drafting (:func:`draft_tree`): the draft proposes each depth in one call over all the nodes
of the previous depth, each node seeing the prefix and its ancestors (a tree attention mask,
position ids from the depth: specviz.lm.CachedLM.masked_logits). A node's children are drawn
i.i.d. from q at that node, their number fixed by the shape before any is drawn. Greedy
takes the top-B of the draft's softmax at temperature 1 instead (distinct children), each
with q one-hot on itself, as greedy warping makes it. An EOS node gets no children.

Verification (specviz.verify.tree_walk, as ``Verification.decide_tree``): walk down from the
root. At a node with target row p, its children are tried one after another in draw order
against an updated target p' (p' = p; child x kept with probability min(1, p'(x)/q(x)); on a
rejection p' = norm(max(0, p' - q))). The walk descends into the first child kept; where
every child is rejected it emits a draw from the final p', and at a leaf the bonus from the
leaf's own row of p. The output is exactly p's (SpecInfer's multi-step speculative sampling;
Yang et al. 2024). Exact match samples the target's own y ~ p at every node and descends
into the first child equal to it. "same-target-for-siblings" is a deliberately wrong rule,
for the distribution check: every sibling is tried against the original p, and after all are
rejected the draw comes from norm(max(0, p - q)).

Random draws come in a fixed order: the children depth by depth (parents in node order),
then one uniform per node (all nodes, in node order), then the added token; exact match
draws the target's samples at the root and every node instead of the uniforms. A tree with
one child per depth consumes them exactly as a chain of the same length does, and takes the
chain's model calls (no mask is needed), so it gives the chain's trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specviz.config import Warp
from specviz.lm import CachedLM, common_prefix
from specviz.sampling import draw, warp
from specviz.verify.tree_walk import ROOT


@dataclass
class TreeDraft:
    """The drafted tree: nodes breadth first, and the draft rows their children came from."""

    ids: list[int] = field(default_factory=list)  # [n]
    parents: list[int] = field(default_factory=list)  # [n] ROOT or an earlier node
    depths: list[int] = field(default_factory=list)  # [n] from 1
    q_rows: list[torch.Tensor] = field(default_factory=list)  # rows[0] at the root, then fed nodes
    q_row_of: dict[int, int] = field(default_factory=dict)  # node (or ROOT) -> index in q_rows
    slots: dict[int, int] = field(default_factory=dict)  # fed node -> its slot in the draft cache
    greedy: bool = False

    def __len__(self) -> int:
        return len(self.ids)

    def children(self, node: int) -> list[int]:
        return [j for j, par in enumerate(self.parents) if par == node]

    def q(self, j: int) -> torch.Tensor:
        """The row node j was drawn from [V]: q at its parent; greedy: one-hot on itself."""
        if self.greedy:
            row = torch.zeros_like(self.q_rows[0])
            row[self.ids[j]] = 1.0
            return row
        return self.q_rows[self.q_row_of[self.parents[j]]]

    def q_x(self) -> torch.Tensor:
        """[n] q(x_j) at node j's parent, for every node."""
        if self.greedy or not self.ids:
            return torch.ones(len(self.ids))
        rows = torch.stack(self.q_rows)
        idx = torch.tensor([self.q_row_of[par] for par in self.parents])
        return rows[idx, torch.tensor(self.ids)].cpu()

    def is_path(self) -> bool:
        """Whether the tree is one chain (each node the child of the one before it)."""
        return all(par == j - 1 for j, par in enumerate(self.parents))

    def ancestors(self, j: int) -> list[int]:
        """Node j's ancestors, root side first (not j itself)."""
        out = []
        while self.parents[j] != ROOT:
            j = self.parents[j]
            out.append(j)
        return out[::-1]


def _children_of(
    q: torch.Tensor, logits: torch.Tensor, b: int, w: Warp, gen: torch.Generator
) -> list[int]:
    """b children: i.i.d. draws from q; greedy: the argmax, then the next b - 1 of the
    draft's softmax at temperature 1 (the logits' order)."""
    if w.greedy:
        first = int(logits.argmax(-1))
        if b == 1:
            return [first]
        rest = logits.float().clone()
        rest[first] = float("-inf")
        more = min(b, rest.shape[-1]) - 1  # a vocabulary smaller than b gives fewer
        return [first, *torch.topk(rest, more).indices.tolist()]
    if b == 1:
        return [int(draw(q, gen, False))]
    return torch.multinomial(q[None], b, replacement=True, generator=gen)[0].tolist()


def draft_tree(
    lm: CachedLM,
    seq: list[int],
    shape: tuple[int, ...],
    depth: int,
    w: Warp,
    eos_ids: frozenset[int],
    gen: torch.Generator,
) -> TreeDraft:
    """Draft `depth` levels of the shape after seq: one draft call per depth."""
    tree = TreeDraft(greedy=w.greedy)
    logits = lm.logits(seq)[-1]  # the root: feeds seq's uncached tail
    tree.q_rows.append(warp(logits, w))
    tree.q_row_of[ROOT] = 0
    raw = {ROOT: logits}
    frontier = [ROOT]
    for d in range(1, depth + 1):
        level = []
        for par in frontier:
            q = tree.q_rows[tree.q_row_of[par]]
            for x in _children_of(q, raw[par], shape[d - 1], w, gen):
                level.append(len(tree.ids))
                tree.ids.append(x)
                tree.parents.append(par)
                tree.depths.append(d)
        frontier = [j for j in level if tree.ids[j] not in eos_ids]
        if d == depth or not frontier:
            break
        rows = _feed(lm, seq, tree, frontier)  # [len(frontier), V]
        for j, row in zip(frontier, rows, strict=True):
            raw[j] = row
            tree.q_row_of[j] = len(tree.q_rows)
            tree.q_rows.append(warp(row, w))
    return tree


BUDGET_BRANCHING = 4  # a dynamic tree's most children under one node


def budget_allowance(remaining: int, depths_left: int) -> int:
    """The nodes a dynamic tree may add at the next depth: its remaining budget spread
    evenly over the depths left, rounded up (what a depth cannot place carries over)."""
    return -(-remaining // depths_left)


def root_children(budget: int, depth: int) -> int:
    """A dynamic tree's children at the root: fixed by the budget and the depth alone."""
    return min(BUDGET_BRANCHING, budget_allowance(budget, depth))


def draft_budget_tree(
    lm: CachedLM,
    seq: list[int],
    budget: int,
    depth: int,
    w: Warp,
    eos_ids: frozenset[int],
    gen: torch.Generator,
) -> tuple[TreeDraft, str]:
    """A dynamic tree (EAGLE-2 style) of at most `budget` nodes and `depth` levels, one
    draft call per depth, and why it stopped growing ("gamma": it reached `depth`; "eos":
    every frontier node is EOS; "nodes": the budget is spent).

    A node's score is its path confidence: the product along its path of each node's q at
    its parent (greedy: the draft's softmax at temperature 1). At depth d the allowance is
    :func:`budget_allowance` of the nodes left over the depths left; the frontier (depth
    d - 1's non-EOS nodes, the root at d = 1) is ranked by score (ties: node order) and each
    node in turn gets min(BUDGET_BRANCHING, allowance left) children until the allowance is
    spent. Every count is fixed before any child of the depth is drawn, from the scores of
    nodes already drawn; children are then drawn i.i.d. from q at their parent (greedy: the
    top-B), parents in node order, and none is ever dropped."""
    tree = TreeDraft(greedy=w.greedy)
    logits = lm.logits(seq)[-1]
    tree.q_rows.append(warp(logits, w))
    tree.q_row_of[ROOT] = 0
    raw = {ROOT: logits}
    score = {ROOT: 1.0}
    frontier = [ROOT]
    left = budget
    for d in range(1, depth + 1):
        allowance = min(left, budget_allowance(left, depth - d + 1))
        counts: dict[int, int] = {}
        for par in sorted(frontier, key=lambda j: (-score[j], j)):
            if allowance <= 0:
                break
            counts[par] = min(BUDGET_BRANCHING, allowance)
            allowance -= counts[par]
        parents = [j for j in frontier if j in counts]  # node order
        if d > 1:  # the depth's one draft call: q at the parents it expands
            rows = _feed(lm, seq, tree, parents)
            for j, row in zip(parents, rows, strict=True):
                raw[j] = row
                tree.q_row_of[j] = len(tree.q_rows)
                tree.q_rows.append(warp(row, w))
        level = []
        for par in parents:
            q = tree.q_rows[tree.q_row_of[par]]
            conf = torch.softmax(raw[par].float(), -1) if w.greedy else q
            for x in _children_of(q, raw[par], counts[par], w, gen):
                j = len(tree.ids)
                level.append(j)
                tree.ids.append(x)
                tree.parents.append(par)
                tree.depths.append(d)
                score[j] = score[par] * float(conf[x])
        left -= len(level)
        frontier = [j for j in level if tree.ids[j] not in eos_ids]
        if d == depth:
            return tree, "gamma"
        if not frontier:
            return tree, "eos"
        if left <= 0:
            return tree, "nodes"
    return tree, "gamma"


def _feed(lm: CachedLM, seq: list[int], tree: TreeDraft, nodes: list[int]) -> torch.Tensor:
    """One draft call over nodes (one depth), each seeing the prefix and its ancestors."""
    _hold(lm, seq)
    start = lm.cached
    if len(nodes) == 1 and not lm.branched:
        j = nodes[0]
        last = tree.slots.get(tree.parents[j], len(seq) - 1)
        if last == start - 1:  # the node extends the cache's sequence: a plain step
            tree.slots[j] = start
            return lm.logits([*lm.tokens, tree.ids[j]])[-1:]
    visible = torch.zeros(len(nodes), start + len(nodes), dtype=torch.bool)
    visible[:, : len(seq)] = True
    for r, j in enumerate(nodes):
        tree.slots[j] = start + r
        for a in (*tree.ancestors(j), j):
            visible[r, tree.slots[a]] = True
    positions = [len(seq) - 1 + tree.depths[j] for j in nodes]
    return lm.masked_logits([tree.ids[j] for j in nodes], positions, visible)


def _hold(lm: CachedLM, seq: list[int]) -> None:
    """Make the model's cache hold seq before a masked call places nodes after it. A cache
    shared by many runs (specviz.analysis.prompt_cache.PromptCache) may have served seq's
    last row from its store without feeding the model; its ``inner`` is the model's cache."""
    inner = getattr(lm, "inner", lm)
    if not inner.branched and common_prefix(inner.tokens, seq) < len(seq):
        inner.rollback(seq)
        inner.logits(seq)


def target_rows(lm: CachedLM, seq: list[int], tree: TreeDraft) -> tuple[torch.Tensor, bool]:
    """The target's logits in one call: [n + 1, V], row 0 after seq, row 1 + j after node j;
    and whether the cache now holds branches (gather the path with :func:`keep_path`)."""
    n = len(tree)
    if tree.is_path():  # a chain: the ordinary causal call, exactly as the chain engine
        return lm.logits(seq + tree.ids, keep=n + 1), False
    lm.rollback(seq)
    start = min(lm.cached, len(seq) - 1)
    lm.rollback(seq[:start])
    tail = seq[start:]
    t, total = len(tail), len(seq) + n
    visible = torch.zeros(t + n, total, dtype=torch.bool)
    visible[:t, :start] = True
    visible[:t, start : len(seq)] = torch.ones(t, t, dtype=torch.bool).tril()
    visible[t:, : len(seq)] = True
    for j in range(n):
        for a in (*tree.ancestors(j), j):
            visible[t + j, len(seq) + a] = True
    positions = list(range(start, len(seq))) + [len(seq) - 1 + d for d in tree.depths]
    logits = lm.masked_logits(tail + tree.ids, positions, visible, keep=n + 1)
    return logits, True


def keep_path(lm: CachedLM, prefix_len: int, slots: list[int]) -> None:
    """After a tree call: keep the prefix's slots and the accepted path's."""
    if lm.branched:
        lm.keep(list(range(prefix_len)) + slots)
