"""Adaptive gamma: the schedule itself, and that it changes nothing in the output.

Greedy: adaptive speculative output equals greedy autoregressive output token for token.
Sampling: five-token continuations drawn with adaptive gamma follow the exact target
distribution (the check's statistics), while gamma really does move between rounds.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from specviz.analysis import distribution_check
from specviz.config import Settings
from specviz.engine import generate
from specviz.rounds import next_gamma
from tests.tiny import tiny_pair

N, LENGTH = 300, 5


pytestmark = pytest.mark.usefixtures("one_thread")


def close_pair(noise: float = 0.5, seed: int = 0):
    """A tiny pair whose draft is the target with a perturbed head: it agrees often, not always."""
    pair = tiny_pair(vocab=8, target_seed=0, draft_seed=0)
    draft = copy.deepcopy(pair.target.model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        w = draft.lm_head.weight
        w.add_(noise * w.std() * torch.randn(w.shape, generator=g))
    return dataclasses.replace(pair, draft=dataclasses.replace(pair.draft, model=draft))


def test_next_gamma_grows_by_two_and_shrinks_by_one():
    assert next_gamma(4, 4, 4, 32) == 6
    assert next_gamma(4, 4, 2, 32) == 3
    assert next_gamma(1, 1, 0, 32) == 1
    assert next_gamma(31, 31, 31, 32) == 32
    assert next_gamma(5, 0, 0, 32) == 5  # nothing drafted (budget, or no n-gram match)


@pytest.mark.parametrize("prompt", ["1 2", "3 1 4 1 5", "7"])
def test_greedy_adaptive_equals_greedy_autoregressive(prompt):
    pair = close_pair()
    s = Settings(greedy=True, max_new_tokens=40, gamma=2, adaptive_gamma=True)
    spec = generate(pair, prompt, s)
    ar = generate(pair, prompt, s.with_(method="ar"))
    assert spec.token_ids == ar.token_ids
    assert len({r.gamma for r in spec.rounds}) >= 3  # the schedule moved


@pytest.fixture(scope="module")
def adaptive_samples():
    """N samples of each method as the distribution check draws them (one prefill, drafts to
    full depth), and the gammas the speculative runs' rounds used."""
    pair = close_pair()
    base = Settings(temperature=4.0, gamma=1, adaptive_gamma=True, trace_level="minimal")
    sampler = distribution_check.Sampler(pair, "1 2", base, LENGTH)
    spec, ar, gammas = [], [], set()
    try:
        for i in range(N):
            t = sampler.run("spec", 2 * i)
            spec.append(tuple(t.token_ids[:LENGTH]))
            ar.append(tuple(sampler.run("ar", 2 * i + 1).token_ids[:LENGTH]))
            gammas |= {r.gamma for r in t.rounds}
    finally:
        sampler.close()
    return pair, base, spec, ar, gammas


def test_adaptive_gamma_moves_within_a_continuation(adaptive_samples):
    gammas = adaptive_samples[4]
    assert {1, 3} <= gammas


def test_adaptive_sampling_follows_the_target(adaptive_samples):
    pair, base, spec, ar, _ = adaptive_samples
    probs = distribution_check.TargetProbs(pair, [1, 2], base.target_warp())
    views = distribution_check.compare(pair, probs, spec, ar, LENGTH)
    assert [v.name for v in views] == ["first token", f"continuation of {LENGTH} tokens"]
    for v in views:
        assert len(v.labels) >= 4, "too few bins to test anything"
        assert v.spec_test.p_value > 0.01 / len(views), (v.name, v.spec_test)
        assert v.two_sample.p_value > 0.01 / len(views), (v.name, v.two_sample)
