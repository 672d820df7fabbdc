"""Speculative sampling leaves the target's distribution unchanged.

On tiny models with a 6-token vocabulary, the exact probability of every 3-token
continuation under the target (after temperature, top-k and top-p) is enumerated, and
20,000 seeded speculative samples are compared with it by a chi-square test and a
total-variation bound. The same check must reject the deliberately wrong rules. A smaller
run on a transformers Llama checks the same on the model class the app uses.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch

from specviz.config import Settings
from specviz.engine import generate
from tests.tiny import bag_pair, tiny_pair

VOCAB, LENGTH, N = 6, 3, 20_000
PROMPT = "1"


def reference_probs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> list[float]:
    """An independent, plain-Python statement of temperature / top-k / top-p for one row."""
    scaled = [x / temperature for x in logits.double().tolist()]
    if top_k:
        kth = sorted(scaled, reverse=True)[top_k - 1]
        scaled = [x if x >= kth else -math.inf for x in scaled]
    m = max(scaled)
    w = [math.exp(x - m) for x in scaled]
    probs = [x / sum(w) for x in w]
    if top_p < 1.0:
        keep, mass = set(), 0.0
        for i in sorted(range(len(probs)), key=lambda i: -probs[i]):
            if mass >= top_p:
                break
            keep.add(i)
            mass += probs[i]
        probs = [x if i in keep else 0.0 for i, x in enumerate(probs)]
        probs = [x / sum(probs) for x in probs]
    return probs


def full_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Logits at every position of each row of ids [S, len], without reusing a cache."""
    from transformers import DynamicCache

    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        return model(input_ids=ids).logits
    rows = [
        model(
            input_ids=r[None], past_key_values=DynamicCache(), logits_to_keep=ids.shape[1]
        ).logits[0]
        for r in ids
    ]
    return torch.stack(rows)


@torch.no_grad()
def exact_distribution(pair, settings: Settings) -> dict[tuple[int, ...], float]:
    """P(x1..xL | prompt) under the target, for every continuation, by full forwards."""
    prompt = [int(t) for t in PROMPT.split()]
    seqs = list(itertools.product(range(VOCAB), repeat=LENGTH))
    ids = torch.tensor([prompt + list(s[:-1]) for s in seqs])
    logits = full_logits(pair.target.model, ids)  # [S, len, V]
    w = settings.target_warp()
    out = {}
    for row, s in enumerate(seqs):
        prob = 1.0
        for i, x in enumerate(s):
            pos = len(prompt) - 1 + i
            prob *= reference_probs(logits[row, pos], w.temperature, w.top_k, w.top_p)[x]
        out[s] = prob
    return out


def sample(pair, settings: Settings, n: int) -> Counter:
    counts: Counter = Counter()
    for seed in range(n):
        trace = generate(pair, PROMPT, settings.with_(seed=seed))
        counts[tuple(trace.token_ids)] += 1
    return counts


def chi_square_pvalue(counts: Counter, exact: dict, n: int) -> tuple[float, float]:
    """Pearson's chi-square and its p-value; cells expected below 5 are pooled together
    (and the pool into the smallest cell if it is itself below 5)."""
    impossible = sum(o for s, o in counts.items() if exact.get(s, 0.0) == 0.0)
    if impossible:  # an outcome the target never produces was sampled
        return math.inf, 0.0
    cells = [[exact[s] * n, counts.get(s, 0)] for s in sorted(exact, key=lambda s: -exact[s])]
    big = [c for c in cells if c[0] >= 5]
    pool = [sum(c[0] for c in cells if c[0] < 5), sum(c[1] for c in cells if c[0] < 5)]
    if pool[0] >= 5:
        big.append(pool)
    elif pool[0] > 0:
        big[-1] = [big[-1][0] + pool[0], big[-1][1] + pool[1]]
    stat = sum((o - e) ** 2 / e for e, o in big)
    df = len(big) - 1
    p = torch.special.gammaincc(
        torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)
    )
    return stat, float(p)


def total_variation(counts: Counter, exact: dict, n: int) -> float:
    keys = set(exact) | set(counts)
    return 0.5 * sum(abs(counts.get(s, 0) / n - exact.get(s, 0.0)) for s in keys)


@pytest.fixture(scope="module")
def pair():
    return bag_pair(vocab=VOCAB, target_seed=3, draft_seed=4)


EXACT_CASES = {
    "plain": Settings(gamma=2, max_new_tokens=LENGTH, trace_level="minimal"),
    "temperature": Settings(gamma=3, temperature=0.7, max_new_tokens=LENGTH, trace_level="minimal"),
    "top-k": Settings(gamma=2, top_k=3, max_new_tokens=LENGTH, trace_level="minimal"),
    "top-p": Settings(
        gamma=2, top_p=0.8, temperature=1.3, max_new_tokens=LENGTH, trace_level="minimal"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EXACT_CASES))
def test_speculative_samples_follow_the_target(pair, case):
    settings = EXACT_CASES[case]
    exact = exact_distribution(pair, settings)
    counts = sample(pair, settings, N)
    stat, p = chi_square_pvalue(counts, exact, N)
    tv = total_variation(counts, exact, N)
    assert p > 1e-3, f"{case}: chi2={stat:.1f}, p={p:.2g}, tv={tv:.3f}"
    assert tv < 0.04, f"{case}: total variation {tv:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["resample-from-p", "accept-without-draw"])
def test_the_check_rejects_a_wrong_rule(pair, rule):
    settings = EXACT_CASES["plain"].with_(rule=rule)
    exact = exact_distribution(pair, settings)
    counts = sample(pair, settings, N)
    stat, p = chi_square_pvalue(counts, exact, N)
    assert p < 1e-6, f"{rule} passed the check: chi2={stat:.1f}, p={p:.2g}"


def test_samples_follow_the_target_on_a_transformers_llama():
    llama = tiny_pair(vocab=VOCAB, target_seed=3, draft_seed=4, sharpness=0.7)
    settings = EXACT_CASES["plain"]
    exact = exact_distribution(llama, settings)
    n = 2000
    counts = sample(llama, settings, n)
    stat, p = chi_square_pvalue(counts, exact, n)
    assert p > 1e-3, f"chi2={stat:.1f}, p={p:.2g}"


def test_the_rejection_check_is_not_vacuous(pair):
    """The draft differs enough from the target for wrong rules to show: alpha well below 1."""
    trace = generate(
        pair, PROMPT, EXACT_CASES["plain"].with_(trace_level="full", max_new_tokens=30)
    )
    assert 0.2 < trace.stats.alpha < 0.9
