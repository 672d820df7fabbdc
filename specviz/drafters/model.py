"""The model drafter: a small model with its own KV cache drafts autoregressively (q is its
warped softmax), and a tree depth by depth (specviz.tree). It may stop a chain at a token it
is unsure of (``confidence``): whether it drafts position i + 1 depends on positions up to
i only, so a lossless verification's output stays exact.

A draft that is the target's own weights at a lower precision (the offline draft,
ModelPair.draft_is_target_copy) is a :class:`TargetCopyDrafter`: it does not read the
prompt. Its first round drafts nothing (stop "prompt"), so that the target's call reads the
prompt alone and gives the first token; it then takes the target's keys and values of the
prompt (ModelCache.take_prefix) in place of a prefill of its own. Which cache q was
computed on never touches exactness; it saves the draft's prefill, about as long as the
target's on a CPU. The rounds know nothing of it."""

from __future__ import annotations

from typing import Any

import torch

from specviz.config import Warp
from specviz.drafters.base import Draft, TargetOut
from specviz.lm import ModelCache
from specviz.sampling import draw, warp
from specviz.tree import TreeDraft, draft_budget_tree, draft_tree, keep_path


class ModelDrafter:
    """Drafts autoregressively from a small model with its own KV cache."""

    name = "model"

    def __init__(
        self,
        lm: ModelCache,
        w: Warp,
        eos_ids: frozenset[int],
        confidence: float | None = None,
        tree: tuple[int, ...] | None = None,
        tree_budget: int | None = None,
    ) -> None:
        self.lm, self.w, self.eos_ids, self.confidence = lm, w, eos_ids, confidence
        self.tree, self.tree_budget = tree, tree_budget

    @classmethod
    def build(cls, settings: Any, pair: Any, open_lm: Any) -> ModelDrafter:
        """The pair's draft model behind its own cache; a TargetCopyDrafter where the draft
        is the target's own weights at a lower precision."""
        lm = open_lm(pair.draft, (1, 2))  # one token, or two after a full accept
        kind = TargetCopyDrafter if pair.draft_is_target_copy else cls
        return kind(
            lm,
            settings.draft_warp(),
            pair.eos_ids,
            settings.draft_confidence,
            settings.tree,
            settings.tree_budget,
        )

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        ids: list[int] = []
        rows: list[torch.Tensor] = []
        ctx = list(seq)
        stop = "gamma"
        for i in range(gamma):
            logits = self.lm.logits(ctx)[-1]
            q = warp(logits, self.w)  # [Vq]
            x = int(draw(q, gen, self.w.greedy))
            ids.append(x)
            rows.append(q)
            if x in self.eos_ids:
                stop = "eos"
                break
            if i + 1 < gamma and self.unsure(logits, q, x):
                stop = "confidence"
                break
            ctx.append(x)
        q_all = torch.stack(rows) if rows else torch.empty(0, self.lm.vocab_size)
        return Draft(ids, q_all, stop)

    def unsure(self, logits: torch.Tensor, q: torch.Tensor, x: int) -> bool:
        """Whether the draft's own probability of x is below the confidence threshold: q(x),
        or in greedy mode (q one-hot) the draft's softmax at temperature 1."""
        if self.confidence is None:
            return False
        conf = torch.softmax(logits.float(), -1)[x] if self.w.greedy else q[x]
        return float(conf) < self.confidence

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        """The settings' tree (a fixed shape, or a dynamic tree's node budget), one draft
        call per depth; nothing when depth is 0 (the budget is spent)."""
        if depth > 0 and self.tree_budget is not None:
            return draft_budget_tree(
                self.lm, seq, self.tree_budget, depth, self.w, self.eos_ids, gen
            )
        if depth > 0 and self.tree is not None:
            tree = draft_tree(self.lm, seq, self.tree, depth, self.w, self.eos_ids, gen)
            return tree, "eos" if max(tree.depths) < depth else "gamma"
        return TreeDraft(greedy=self.w.greedy), "budget"

    def keep_path(self, tree: TreeDraft, path: list[int], prefix: list[int]) -> None:
        keep_path(self.lm, len(prefix), [tree.slots[j] for j in path if j in tree.slots])

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        self.lm.rollback(seq)

    def close(self) -> None:
        self.lm.close()  # the compiled path's caches go back to their pool


class TargetCopyDrafter(ModelDrafter):
    """A model drafter whose model is the target's own weights at a lower precision: it takes
    the target's keys and values of the prompt instead of reading the prompt itself."""

    has_prompt: bool = False  # the draft's cache holds the prompt, taken from the target
    waits: bool = False  # this round drafted nothing, for the target to read the prompt

    def _holds_prompt(self) -> bool:
        """Whether the draft's cache holds the prompt: taken from the target, or there from
        the start (a cache that already read it, as the distribution check's prompt cache
        hands over): only an empty cache waits for the target's."""
        self.has_prompt = self.has_prompt or bool(self.lm.tokens)
        return self.has_prompt

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        if not self._holds_prompt():
            self.waits = True  # the target's call reads the prompt alone
            return Draft([], torch.empty(0, self.lm.vocab_size), "prompt")
        return super().propose(seq, gamma, gen)

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        if depth > 0 and not self._holds_prompt():
            self.waits = True
            return TreeDraft(greedy=self.w.greedy), "prompt"
        return super().propose_tree(seq, depth, gen)

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        if self.waits:
            # the target's cache holds the prompt: take its keys and values, converted to
            # the draft's dtype, as the draft's prefill
            self.lm.take_prefix(target.cache.tokens, target.cache.prefix_kv())
            self.has_prompt, self.waits = True, False
        super().after_round(seq, target)
