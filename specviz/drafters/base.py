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
    # its last hidden state at every position of the accepted sequence that this call read,
    # in order from position features_at (the prompt's, on the first call; then the
    # previous round's added token, and the accepted drafts): [m, H]; None: not given
    features: torch.Tensor | None = None
    features_at: int = 0


def target_out(
    target: ModelCache,
    logits: torch.Tensor,
    rows: list[int] | slice,
    path: list[int] | None = None,
) -> TargetOut:
    """The target's outputs of its verify call, whose logits [k, V] are the last k rows it
    read: at rows (those that scored the new tokens), its logits, and its last hidden state
    where its cache kept one (asked for it: an eager cache, or one on the aoti packages;
    torch.compile's give none).
    path: the logit rows of the round's root and of its accepted drafts, in order (default
    rows); the features are the hidden state at the rows the call read before its logit
    rows (the sequence's tail) and at path's."""
    gives = getattr(target, "gives_hidden", False)
    hidden = getattr(target, "hidden_all", None) if gives else None
    picked = list(range(len(logits)))[rows] if isinstance(rows, slice) else list(rows)
    tail = -1 if hidden is None else len(hidden) - len(logits)  # rows read before the logits'
    if tail < 0:  # none kept, or not this call's
        return TargetOut(logits[rows], None, target)

    def at_rows(rs: list[int]) -> torch.Tensor:
        return hidden[torch.tensor([tail + r for r in rs], dtype=torch.long, device=hidden.device)]

    features = torch.cat([hidden[:tail], at_rows(picked if path is None else list(path))])
    at = getattr(target, "hidden_at", 0)
    return TargetOut(logits[rows], at_rows(picked), target, features, at)


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
