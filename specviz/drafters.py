"""Drafters propose the tokens a round verifies; a verification (specviz.verify) judges them.

A drafter returns the drafted ids and, for each, the exact distribution q it was drawn from,
and why it stopped drafting (``Draft.stop``). The model drafter may stop at a token it is
unsure of (``confidence``): whether it drafts position i + 1 depends on positions up to i
only, and a drafted token is never withdrawn, so a lossless verification's output
stays exact. Two drafters:
a small model (q is its warped softmax) and n-gram prompt lookup (q is one-hot on the copied
token). Both are per-request objects: they own their state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.config import Warp
from specviz.lm import ModelCache
from specviz.sampling import draw, warp


@dataclass
class Draft:
    """k drafted tokens and the rows they were drawn from."""

    ids: list[int]  # [k]
    q: torch.Tensor  # [k, Vq] float32
    # why drafting stopped: "gamma" (k reached what was asked), "confidence", "eos", or
    # "lookup" (the n-gram drafter found no longer continuation)
    stop: str = "gamma"


class Drafter(Protocol):
    name: str

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        """Up to gamma tokens to follow seq; stops early after an EOS token."""
        ...

    def rollback(self, seq: list[int]) -> None:
        """The round is over and seq is the accepted sequence: drop state beyond it."""
        ...


class ModelDrafter:
    """Drafts autoregressively from a small model with its own KV cache."""

    name = "model"

    def __init__(
        self,
        lm: ModelCache,
        w: Warp,
        eos_ids: frozenset[int],
        confidence: float | None = None,
    ) -> None:
        self.lm, self.w, self.eos_ids, self.confidence = lm, w, eos_ids, confidence

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

    def rollback(self, seq: list[int]) -> None:
        self.lm.rollback(seq)


class NgramDrafter:
    """Prompt lookup: copy what most often followed the last n tokens earlier in the text.

    Finds every earlier occurrence of the last n tokens, for n = ngram_size down to 1 (the
    longest n that occurs), and drafts up to gamma tokens one at a time: each is the token
    that most of the occurrences still in agreement with the draft so far were followed by,
    a tie going to the earliest occurrence. With one occurrence, or when they all agree,
    that is what followed the earliest one, as in transformers' prompt lookup. q is one-hot
    on each drafted token, so the rejection rule accepts it with probability p(x) and a rejection
    resamples from p with x removed. No occurrence proposes nothing; the round is then a
    plain target step.
    """

    name = "ngram"

    def __init__(self, vocab_size: int, ngram_size: int, eos_ids: frozenset[int]) -> None:
        self.vocab_size, self.ngram_size, self.eos_ids = vocab_size, ngram_size, eos_ids

    def lookup(self, seq: list[int], gamma: int) -> list[int]:
        if len(seq) < 2:
            return []
        # Every occurrence of the last n tokens ends with the last token: one scan for that
        # token's earlier positions serves every n, and the longer tails are checked there.
        ends = [e for e, x in enumerate(seq[:-1]) if x == seq[-1]]  # earliest first
        for n in range(min(self.ngram_size, len(seq) - 1), 0, -1):
            tail = seq[-n:]
            follow = [
                seq[e + 1 : e + 1 + gamma]
                for e in ends
                if e >= n - 1 and seq[e - n + 1 : e + 1] == tail
            ]
            if follow:
                return self._plurality(follow, gamma)
        return []

    def _plurality(self, follow: list[list[int]], gamma: int) -> list[int]:
        """Token by token, what most continuations that agree with the draft so far hold
        next (dicts keep insertion order, so max() breaks a tie by the earliest); stops after
        an EOS token."""
        out: list[int] = []
        while len(out) < gamma:
            follow = [f for f in follow if len(f) > len(out)]
            if not follow:
                break
            votes: dict[int, int] = {}
            for f in follow:
                votes[f[len(out)]] = votes.get(f[len(out)], 0) + 1
            x = max(votes, key=votes.__getitem__)
            out.append(x)
            if x in self.eos_ids:
                break
            follow = [f for f in follow if f[len(out) - 1] == x]
        return out

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        ids = self.lookup(seq, gamma)
        q = torch.zeros(len(ids), self.vocab_size)
        if ids:
            q[torch.arange(len(ids)), torch.tensor(ids)] = 1.0
        stop = "gamma" if len(ids) == gamma else "lookup"
        if ids and ids[-1] in self.eos_ids:
            stop = "eos"
        return Draft(ids, q, stop)

    def rollback(self, seq: list[int]) -> None:
        pass
