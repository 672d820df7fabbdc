"""EAGLE heads for the tests (tests/test_head.py): a head trained in a fraction of a second
on a tiny target's own samples, a drafter whose q is deliberately not the row it drew from,
and the sampled-exactness check's case and sample size, from power.

The check is tests/test_distribution.py's, on a transformers Llama (a head reads a Llama's
hidden states; BagLM has none): seeded runs of the engine, each outcome's exact probability
enumerated from the target without a cache, Pearson's chi-square (outcomes expected fewer
than 5 times pooled) in three views, the first 2 and 3 tokens and the whole continuation.
The first round drafts nothing (the prompt's features come with the target's first call),
so the token the views add beyond the first is what the drafts decide.

Its size, from power as tests/distribution_power.py computes the chain's: the wrong drafter
(:class:`WrongQDrafter`: it draws at twice the draft's temperature and reports q at the
draft's own) gave a noncentrality per sample, (chi-square - df) / n, from NEST = 2,000
samples, of 0.37 (first 2), 0.57 (first 3) and 0.51 (continuation): it fails the check (a
view at p <= EXACT_P) with probability 0.99 from N = 110 samples. N = 300 leaves a wide
margin, and keeps the exact runs' rejected drafts above 100 (109: 491 kept). Run from the
repository root: `python -m tests.head_check`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter

import torch

from specviz.analysis.chisquare import pooled_chi_square, pooled_statistic
from specviz.config import Settings
from specviz.drafters import Entry, register
from specviz.drafters.base import Draft
from specviz.drafters.head import FeatureHead, HeadDrafter, fit, target_features
from specviz.engine import generate
from specviz.pair import ModelPair
from specviz.sampling import warp
from tests.test_distribution import exact_distribution, marginal
from tests.tiny import tiny_pair

WRONG = "eagle-wrong-q"
N = 300
EXACT_P = 1e-4  # as tests/test_distribution.py: the exact drafter keeps every view above it
VIEWS = (2, 3)  # the first k tokens' views, beside the whole continuation
CHECK = Settings(temperature=1.0, top_p=1.0, gamma=3, max_new_tokens=4, trace_level="minimal")
CHECK_PROMPT = "1"


def sequences(model: torch.nn.Module, vocab: int, n: int, length: int, seed: int) -> torch.Tensor:
    """n sequences of `length` tokens sampled from the model at temperature 1 (a uniform
    first token): [n, length]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (n, 1), generator=g)
    with torch.no_grad():
        for _ in range(length - 1):
            p = torch.softmax(model(input_ids=ids).logits[:, -1, :vocab].float(), -1)
            ids = torch.cat([ids, torch.multinomial(p, 1, generator=g)], 1)
    return ids


def trained_head(pair: ModelPair, steps: int, seed: int = 0) -> FeatureHead:
    """A head for the pair's target, initialised from `seed` and trained for `steps` full
    batches of 64 of the target's own sequences of 16 tokens."""
    model = pair.target.model
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        head = FeatureHead.for_target(model)
    ids = sequences(model, pair.vocab_size, 64, 16, seed)
    if steps:
        fit(head, target_features(model, ids), ids, steps=steps, lr=1e-2, seed=seed)
    return head


def with_head(pair: ModelPair, steps: int, seed: int = 0) -> ModelPair:
    pair.head = trained_head(pair, steps, seed)  # type: ignore[attr-defined]
    return pair


def check_pair() -> ModelPair:
    """The check's pair: a 6-token tiny Llama, with a head trained for 20 steps (about 80%
    of its drafts accepted)."""
    return with_head(tiny_pair(vocab=6, target_seed=3, draft_seed=4, sharpness=1.0), 20)


class WrongQDrafter(HeadDrafter):
    """The EAGLE drafter with q wrong in the rule: it draws each draft at twice the draft's
    temperature, and reports q at the draft's own (pitfall 2 of ALGORITHM.md: q not the
    distribution the token was drawn from)."""

    name = WRONG

    def propose(self, seq: list[int], gamma: int, gen: torch.Generator) -> Draft:
        w = self.w
        self.w = dataclasses.replace(w, temperature=2 * w.temperature)
        try:
            draft = super().propose(seq, gamma, gen)
        finally:
            self.w = w
        if draft.ids:  # q at the draft's own warp, from the rows the draws came from
            k = len(draft.ids)
            draft.q = warp(self.lm.logits(seq + draft.ids[:-1], keep=k), w)
        return draft


# registered only while a test uses it (tests/test_head.py's fixture), and by main()
ENTRY = Entry(WRONG, f"{__name__}:WrongQDrafter", False, False, reads_hidden=True)


@dataclasses.dataclass
class Tally:
    samples: int = 0
    drafting_rounds: int = 0
    accepted: int = 0
    rejected: int = 0


def sample(pair: ModelPair, settings: Settings, n: int) -> tuple[Counter, Tally]:
    """n seeded runs' outcomes (seeds 0 .. n - 1), and what their drafts did."""
    counts: Counter = Counter()
    tally = Tally()
    for seed in range(n):
        trace = generate(pair, CHECK_PROMPT, settings.with_(seed=seed))
        counts[tuple(trace.token_ids)] += 1
        tally.samples += 1
        for r in trace.rounds:
            tally.drafting_rounds += bool(r.drafted)
            tally.accepted += sum(d.status == "accepted" for d in r.drafted)
            tally.rejected += sum(d.status == "rejected" for d in r.drafted)
    return counts, tally


def views(counts: Counter, exact: dict, n: int) -> dict[str, tuple[Counter, dict]]:
    """Each view's counts and exact probabilities: the first k tokens, the continuation."""
    out = {}
    for k in VIEWS:
        short: Counter = Counter()
        for s, c in counts.items():
            short[s[:k]] += c
        out[f"first {k}"] = (short, marginal(exact, k))
    out["continuation"] = (counts, exact)
    return out


def check(pair: ModelPair, settings: Settings, n: int = N) -> tuple[dict[str, float], Tally]:
    """Each view's chi-square p-value for n samples under settings, and their tally."""
    exact = exact_distribution(pair, CHECK_PROMPT, settings)
    counts, tally = sample(pair, settings, n)
    found = {v: pooled_chi_square(c, e, n)[1] for v, (c, e) in views(counts, exact, n).items()}
    return found, tally


def main() -> None:
    from tests.distribution_power import needed

    torch.set_num_threads(1)
    register(ENTRY)
    nest = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    pair = check_pair()
    settings = CHECK.with_(drafter=WRONG)
    exact = exact_distribution(pair, CHECK_PROMPT, settings)
    counts, _ = sample(pair, settings, nest)
    worst = 0.0
    for view, (c, e) in views(counts, exact, nest).items():
        stat, df = pooled_statistic(c, e, nest)
        lam = max(0.0, (stat - df) / nest)
        need = needed(lam, df, EXACT_P)
        print(json.dumps({"view": view, "df": df, "per_sample": round(lam, 4), "needed": need}))
        worst = need if worst == 0.0 else min(worst, need)
    _, tally = sample(pair, CHECK.with_(drafter="eagle"), N)
    print(f"the wrong q fails the check from N = {worst}; at N = {N} the exact drafter {tally}")


if __name__ == "__main__":
    main()
