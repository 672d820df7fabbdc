"""A drafter that reads the target's features, for tests only: one module and its registry
entry, as a real feature drafter (EAGLE, Medusa) would be.

After every round it keeps the target's last hidden state at the row that scored the
round's last new token (handed over by the verify call); its next drafts are drawn from the
target's own output layer applied to that state, warped as the draft's rows are. Not a good
drafter (that row predicts the token already emitted), but every draft's q is exactly the
row it was drawn from, so every lossless verification stays exact with it. It drafts a chain
of draws from that one row, or a tree of one level: the settings' children at the root.
"""

from __future__ import annotations

from typing import Any

import torch

from specviz.config import Settings, Warp
from specviz.drafters import Entry, register
from specviz.drafters.base import Draft, TargetOut
from specviz.sampling import draw, warp
from specviz.tree import ROOT, TreeDraft, _children_of

NAME = "target-feature"


class FeatureDrafter:
    name = NAME

    def __init__(self, head: torch.nn.Module, w: Warp, vocab_size: int, fan: int) -> None:
        self.head, self.w, self.vocab_size, self.fan = head, w, vocab_size, fan
        self.features: torch.Tensor | None = None  # [H] the target's last hidden state
        self.seen = 0  # rounds whose target outputs carried a hidden state

    @classmethod
    def build(cls, settings: Settings, pair: Any, open_lm: Any) -> FeatureDrafter:
        head = pair.target.model.get_output_embeddings()
        fan = settings.tree[0] if settings.tree is not None else 1
        return cls(head, settings.draft_warp(), pair.vocab_size, fan)

    def _row(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.features is not None
        with torch.no_grad():
            logits = self.head(self.features)[: self.vocab_size].float()  # [V]
        return logits, warp(logits, self.w)  # [V], [V]

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        if self.features is None:  # the first round: no verify call has run yet
            return Draft([], torch.empty(0, self.vocab_size), "lookup")
        _, q = self._row()
        ids = [int(draw(q, gen, self.w.greedy)) for _ in range(gamma)]
        return Draft(ids, q.expand(len(ids), -1).clone(), "gamma")

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        tree = TreeDraft(greedy=self.w.greedy)
        if self.features is None or depth == 0:
            return tree, "lookup" if depth else "budget"
        logits, q = self._row()
        tree.q_rows.append(q)
        tree.q_row_of[ROOT] = 0
        for x in _children_of(q, logits, self.fan, self.w, gen):
            tree.ids.append(x)
            tree.parents.append(ROOT)
            tree.depths.append(1)
        return tree, "gamma" if depth == 1 else "lookup"

    def keep_path(self, tree: TreeDraft, path: list[int], prefix: list[int]) -> None:
        pass  # no cache of its own

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        if target.hidden is not None:
            self.features = target.hidden[-1]  # [H]
            self.seen += 1

    def close(self) -> None:
        pass


ENTRY = Entry(NAME, f"{__name__}:FeatureDrafter", False, True, reads_hidden=True)
register(ENTRY)
