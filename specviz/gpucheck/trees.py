"""The GPU check's tree stage: the target's verify call over a tree of m nodes (one forward
with a tree attention mask, as specviz.tree.target_rows makes it) against the causal call
over a chain of m drafts, at widths 1..64, each relative to one target decode step. Where
the tree's call costs about the chain's, a tree of the same width pays whenever its
expected accepted depth is higher (docs/trees.md)."""

from __future__ import annotations

from typing import Any

import torch

from specviz.gpucheck.measure import lm_ms, median_ms
from specviz.gpucheck.plan import Plan, prompt_ids
from specviz.lm import CachedLM

TREE_WIDTHS = (1, 2, 4, 8, 16, 32, 64)  # nodes per verify call (MAX_TREE_NODES at most)


def binary_parents(m: int) -> list[int]:
    """A full binary tree of m nodes, breadth first: two children at the root (-1), two
    under each node."""
    return [-1 if j < 2 else (j - 2) // 2 for j in range(m)]


def tree_mask(prefix: int, parents: list[int]) -> tuple[torch.Tensor, list[int]]:
    """The verify call's mask (bool [m, prefix + m]: the prefix and each node's ancestors
    and itself) and position ids (from the depth)."""
    m = len(parents)
    visible = torch.zeros(m, prefix + m, dtype=torch.bool)
    visible[:, :prefix] = True
    depths = []
    for j in range(m):
        a, d = j, 0
        while a != -1:
            visible[j, prefix + a] = True
            a, d = parents[a], d + 1
        depths.append(d)
    return visible, [prefix - 1 + d for d in depths]


@torch.inference_mode()
def masked_ms(model: torch.nn.Module, plan: Plan, ids: list[int], m: int) -> float:
    """A masked call over a binary tree of m nodes after the cached prompt, the branch
    slots dropped (untimed) after each call."""
    lm = CachedLM(model, model.config.vocab_size)
    lm.logits(ids)
    visible, positions = tree_mask(len(ids), binary_parents(m))
    visible = visible.to(plan.device)
    nodes = [0] * m
    prefix = list(range(len(ids)))
    return median_ms(
        lambda: lm.masked_logits(nodes, positions, visible),
        plan,
        plan.reps,
        lambda: lm.keep(prefix),
    )


def tree_verify(target: torch.nn.Module, plan: Plan) -> dict[str, Any]:
    """Verify cost at each width: the chain's causal call and the tree's masked call."""
    ids = prompt_ids(plan, target.config.vocab_size)
    step = lm_ms(CachedLM(target, target.config.vocab_size), plan, ids, 1)
    rows = []
    for m in TREE_WIDTHS:
        chain = lm_ms(CachedLM(target, target.config.vocab_size), plan, ids, m)
        tree = masked_ms(target, plan, ids, m)
        depth = max(tree_mask(0, binary_parents(m))[1]) + 1
        rows.append(
            {
                "width": m,
                "tree_depth": depth,
                "chain_ms": chain,
                "tree_ms": tree,
                "chain_relative": chain / step,
                "tree_relative": tree / step,
                "tree_over_chain": tree / chain,
            }
        )
    impl = getattr(target.config, "_attn_implementation", None) or "eager"
    return {"target_step_ms": step, "attention": impl, "rows": rows}
