"""Target calls of n-gram drafting, replayed from one greedy autoregressive run.

In greedy mode a speculative run makes the autoregressive tokens, whatever drafts them. A
round that drafts d_1..d_k after the text so far keeps the longest prefix of the drafts
that agrees with what the autoregressive run made next, then adds one token of the
target's own. So the target calls of any lookup rule on a prompt follow from the
autoregressive output alone, without a model call: ``replay_calls`` counts them, for
specviz's n-gram drafter (``specviz_lookup``) and for transformers' prompt lookup
(``transformers_lookup``, its own candidate generator). A test checks both counts against
the calls the two engines make.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specviz.drafters import NgramDrafter
from specviz.lm import common_prefix

# (text so far, at most k tokens) -> the drafted tokens
Lookup = Callable[[list[int], int], list[int]]


def replay_calls(prompt: list[int], out: list[int], lookup: Lookup, gamma: int) -> int:
    """Target calls of a greedy speculative run that makes `out` after `prompt` (no EOS
    stop: len(out) is the budget) when `lookup` drafts up to gamma tokens a round. As in
    specviz.engine, a round never drafts past the budget: at most budget - made - 1."""
    made = calls = 0
    while made < len(out):
        k_max = min(gamma, len(out) - made - 1)
        drafts = lookup(prompt + out[:made], k_max)[:k_max] if k_max > 0 else []
        made += common_prefix(drafts, out[made:]) + 1
        calls += 1
    return calls


def specviz_lookup(vocab_size: int, ngram_size: int) -> Lookup:
    """specviz's n-gram drafter (no EOS ids: the bench's runs ignore EOS)."""
    return NgramDrafter(vocab_size, ngram_size, frozenset()).lookup


def transformers_lookup(ngram_size: int) -> Lookup:
    """transformers' PromptLookupCandidateGenerator, as generate(prompt_lookup_num_tokens=k,
    max_matching_ngram_size=ngram_size) builds it, asked for k tokens."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    def lookup(seq: list[int], k: int) -> list[int]:
        gen = PromptLookupCandidateGenerator(
            num_output_tokens=k, max_matching_ngram_size=ngram_size, max_length=len(seq) + k + 1
        )
        ids, _ = gen.get_candidates(torch.tensor([seq]))
        return ids[0, len(seq) :].tolist()

    return lookup
