"""The replayed target calls of n-gram drafting equal the calls each engine makes."""

from __future__ import annotations

import pytest

from specviz.bench.contenders import hf_run, specviz_run
from specviz.bench.lookup import replay_calls, specviz_lookup, transformers_lookup
from tests.tiny import tiny_pair

# A vocabulary of 6 makes the random target repeat itself, so lookups often hit and miss.
PROMPTS = ["1 2 3 1 2 4 1 2", "5 0 5 1 5 0 5", "2 2 3 2 2 4 2"]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=6, sharpness=2.0)


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_replay_counts_the_calls_both_engines_make(pair, prompt, gamma):
    ids, tokens = [int(t) for t in prompt.split()], 24
    ar = specviz_run(pair, "greedy", method="ar")(ids, prompt, 0, tokens).tokens
    sv = specviz_run(pair, "greedy", drafter="ngram", gamma=gamma, ngram_size=3)
    hf = hf_run(pair, "greedy", prompt_lookup_num_tokens=gamma, max_matching_ngram_size=3)
    ours, theirs = sv(ids, prompt, 0, tokens), hf(ids, prompt, 0, tokens)
    assert ours.tokens == theirs.tokens == ar
    assert replay_calls(ids, ar, specviz_lookup(6, 3), gamma) == ours.target_calls
    assert replay_calls(ids, ar, transformers_lookup(3), gamma) == theirs.target_calls


def test_a_lookup_that_always_guesses_right_needs_a_call_per_gamma_plus_one():
    out = list(range(10))
    assert replay_calls([], out, lambda seq, k: out[len(seq) : len(seq) + k], 4) == 2
    assert replay_calls([], out, lambda seq, k: [], 4) == 10
