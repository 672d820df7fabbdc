"""What every drafter is: it proposes drafts (a chain, and where it can a tree), each with
the exact distribution q it was drawn from, and hears what the target's verify call gave
once the round is decided.

A drafter is a per-request object: it owns its state (a draft model's cache, a lookup's
nothing). Whether it drafts position i + 1 may depend on positions up to i only, and a
drafted token is never withdrawn, so a lossless verification's output stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from specviz.lm import ModelCache
    from specviz.tree import TreeDraft


@dataclass
class Draft:
    """k drafted tokens and the rows they were drawn from."""

    ids: list[int]  # [k]
    q: torch.Tensor  # [k, Vq] float32
    # why drafting stopped: "gamma" (k reached what was asked), "confidence", "eos", or
    # "lookup" (the drafter found nothing, or no longer continuation)
    stop: str = "gamma"


@dataclass
class TargetOut:
    """The target's outputs of a round's verify call, at the rows that scored the round's
    new tokens (row i scored new token i), and its cache as the round left it."""

    logits: torch.Tensor  # [len(new), V]
    hidden: torch.Tensor | None  # [len(new), H] its last hidden state; None: not given
    # the target's cache, cropped to the accepted sequence (all of it but the added token):
    # a drafter reads it (the offline draft takes the prompt's keys and values), never
    # changes it
    cache: ModelCache


def target_out(target: ModelCache, logits: torch.Tensor, rows: list[int] | slice) -> TargetOut:
    """The target's outputs at rows: its logits, and its last hidden state where its cache
    kept one (an eager cache asked for it; a compiled one gives none)."""
    hidden = getattr(target, "hidden", None)
    return TargetOut(logits[rows], None if hidden is None else hidden[rows], target)


class Drafter(Protocol):
    name: str

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        """Up to gamma tokens to follow seq; stops early after an EOS token."""
        ...

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        """A tree of at most `depth` levels after seq, and why it stopped growing (one of
        specviz.trace.STOPS). Only a drafter whose entry says ``tree``."""
        ...

    def keep_path(self, tree: TreeDraft, path: list[int], prefix: list[int]) -> None:
        """After a tree's verify call: keep the state of the accepted path's nodes (the
        round's sequence before them is prefix)."""
        ...

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        """The round is over and seq is the accepted sequence: drop state beyond it; target
        is what the verify call gave at the rows that scored the new tokens."""
        ...

    def close(self) -> None:
        """The request is over: release what the drafter holds (once)."""
        ...
