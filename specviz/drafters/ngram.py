"""n-gram prompt lookup: drafts by copying what followed the last tokens earlier in the
text; q is one-hot on each copied token. It drafts chains only."""

from __future__ import annotations

from typing import Any

import torch

from specviz.drafters.base import Draft, TargetOut
from specviz.tree import TreeDraft


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

    @classmethod
    def describe(cls, pair: Any, settings: Any) -> str:
        """What drafts and what it reads, as a trace names it in place of a draft model."""
        return (
            f"n-gram lookup (up to {settings.ngram_size} tokens): proposes what most often "
            "followed the last tokens earlier in the prompt and output; reads no model"
        )

    def __init__(self, vocab_size: int, ngram_size: int, eos_ids: frozenset[int]) -> None:
        self.vocab_size, self.ngram_size, self.eos_ids = vocab_size, ngram_size, eos_ids

    @classmethod
    def build(cls, settings: Any, pair: Any, open_lm: Any) -> NgramDrafter:
        return cls(pair.vocab_size, settings.ngram_size, pair.eos_ids)

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

    def propose_tree(
        self, seq: list[int], depth: int, gen: torch.Generator
    ) -> tuple[TreeDraft, str]:
        raise ValueError("n-gram lookup proposes one chain, not a tree")

    def keep_path(self, tree: TreeDraft, path: list[int], prefix: list[int]) -> None:
        pass

    def after_round(self, seq: list[int], target: TargetOut) -> None:
        pass  # it keeps no state: every proposal reads the sequence afresh

    def close(self) -> None:
        pass
